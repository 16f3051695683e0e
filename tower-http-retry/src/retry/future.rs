//! [`RetryFuture`]: one logical request, from its first attempt to its last outcome. This file is
//! the poll plumbing: each poll that ends something (an attempt, a [`Wait`](super::wait::Wait)
//! between attempts) becomes an [`Event`], the [session](super::session) decides the
//! [`Step`] from it and `now` ([`Session::decide`]), and the future takes the step.
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

use super::hand_back::{HandBack, SendAnyway, Sorting};
use super::nested::retrying;
use super::session::{Event, Session, Step, WaitEnded};
use super::wait::Wait;
use super::watch::AbortWatch;
use crate::classify::Classify;
use crate::message::{RetryRequest, RetryResponse};
use crate::telemetry::{ended_span, Attempt};
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
    pub struct RetryFuture<S, Req, C, H = SendAnyway>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<Attempt<S::Future>, S::Response, S::Error>,
        // The service retries are sent to; `None` when the request is sent only once.
        service: Option<S>,
        session: Session<Req, Sorting<C, H>>,
    }

    impl<S, Req, C, H> PinnedDrop for RetryFuture<S, Req, C, H>
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

impl<S, Req, C, H> RetryFuture<S, Req, C, H>
where
    S: Service<Req>,
    Req: RetryRequest,
{
    /// The first attempt is in flight (`future`, polled with the inner layers told `mark`);
    /// `service`, if kept, is the one retries go to.
    #[inline]
    pub(crate) fn calling(
        session: Session<Req, Sorting<C, H>>,
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
    pub(crate) fn gated(session: Session<Req, Sorting<C, H>>, service: S) -> Self {
        Self {
            state: State::waiting(Wait::joining()),
            service: Some(service),
            session,
        }
    }

    /// The first attempt waits `U(0, first_attempt_jitter)`, then goes to `service` once ready.
    pub(crate) fn delayed(mut session: Session<Req, Sorting<C, H>>, service: S) -> Self {
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

impl<S, Req, C, H> Future for RetryFuture<S, Req, C, H>
where
    S: Service<Req>,
    S::Response: RetryResponse,
    Req: RetryRequest,
    S::Error: 'static,
    C: Classify<S::Response, S::Error>,
    H: HandBack<S::Response, S::Error>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            // What ended (an attempt, a wait) is an event; the session decides the step.
            let (step, answered) = match this.state.as_mut().project() {
                StateProj::Calling { mut future, mark } => {
                    let result = ready!(retrying(*mark, || future.as_mut().poll(cx)));
                    let event = Event::Answered(&result, ended_span(&*future));
                    let step = this.session.decide(event, Instant::now);
                    if let Step::Respond = step {
                        // The common end, taken here so that the outcome is not moved on the
                        // way (a move is a copy). `Respond` holds nothing: forgotten, the step's
                        // drop (which reads what a step may hold) is not paid on every request.
                        std::mem::forget(step);
                        this.state.set(State::Done);
                        return Poll::Ready(result);
                    }
                    (step, Some(result))
                }
                StateProj::Waiting { wait } => {
                    let service = this
                        .service
                        .as_mut()
                        .expect("a request that waits keeps a service");
                    // Only a wait that watches an abort signal reads the endpoint.
                    let scope = this.session.abort_scope();
                    let (abort, authority) = match &scope {
                        Some((abort, authority)) => (Some(*abort), authority.as_deref()),
                        None => (None, None),
                    };
                    let woke = ready!(wait.as_mut().poll_wait(cx, abort, authority, service));
                    drop(scope);
                    let event = Event::Woke(WaitEnded {
                        woke,
                        queue: wait.queued_in(),
                        retrying: wait.retrying(),
                    });
                    (this.session.decide(event, Instant::now), None)
                }
                StateProj::Done => panic!("RetryFuture polled after completion"),
            };
            let state = this.state.as_mut();
            if let Some(output) = take_step(step, answered, state, this.service, this.session) {
                return Poll::Ready(output);
            }
        }
    }
}

/// The state of a [`RetryFuture`] over `S`.
type StateOf<S, Req> = State<
    Attempt<<S as Service<Req>>::Future>,
    <S as Service<Req>>::Response,
    <S as Service<Req>>::Error,
>;

/// Takes `step`, where `answered` is the outcome of the attempt that just ended (none after a
/// wait): the request's output when the step ends it.
fn take_step<S, Req, K>(
    step: Step<S::Response, S::Error>,
    answered: Option<Result<S::Response, S::Error>>,
    mut state: Pin<&mut StateOf<S, Req>>,
    service: &mut Option<S>,
    session: &mut Session<Req, K>,
) -> Option<Result<S::Response, S::Error>>
where
    S: Service<Req>,
    S::Response: RetryResponse,
    Req: RetryRequest,
{
    match step {
        // Taken where the outcome is answered, without moving it; here for completeness.
        Step::Respond => {
            state.set(State::Done);
            answered
        }
        Step::Sleep {
            delay,
            watch,
            token,
        } => {
            let wait = Wait::sleeping(delay, watch, answered, token);
            state.set(State::waiting(wait));
            None
        }
        Step::Queue {
            queue,
            deadline,
            listener,
        } => {
            match answered {
                Some(_) => {
                    let wait = Wait::queued(queue, deadline, listener, answered);
                    state.set(State::waiting(wait));
                }
                None => waiting(state).queue(queue, deadline, listener),
            }
            None
        }
        Step::Ready => {
            waiting(state).ready();
            None
        }
        Step::Send => {
            waiting(state.as_mut()).spend();
            let service = service
                .as_mut()
                .expect("a request that waits keeps a service");
            // The previous outcome is released here, as the next attempt is sent.
            let (future, mark) = session.send(service);
            state.set(State::Calling { future, mark });
            None
        }
        Step::Stop(reason) => {
            let result = match answered {
                Some(result) => result,
                None => waiting(state.as_mut()).take_last(),
            };
            state.set(State::Done);
            Some(session.finish(result, reason))
        }
        Step::StopWith(result, reason) => {
            state.set(State::Done);
            Some(session.finish(result, reason))
        }
        Step::Done(output) => {
            state.set(State::Done);
            Some(output)
        }
    }
}

/// The wait that `state` is in: the step after a wait acts on it.
fn waiting<F, Res, E>(state: Pin<&mut State<F, Res, E>>) -> Pin<&mut Wait<Res, E>> {
    match state.project() {
        StateProj::Waiting { wait } => wait.as_mut(),
        _ => unreachable!("only a wait between attempts is taken this step"),
    }
}

impl<S, Req, C, H> fmt::Debug for RetryFuture<S, Req, C, H>
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
