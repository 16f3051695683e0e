//! [`CircuitBreakerFuture`]: a call that went through (holding its ticket) or was refused.

use super::state::{Admission, Pass};
use super::template::Shared;
use crate::classify::{Ask, Classify, NotSent, Outcome};
use crate::error::CircuitOpen;
use crate::message::RetryResponse;
use http::Method;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::time::Instant;
use tower::BoxError;

pin_project! {
    /// The future of [`CircuitBreaker`](crate::circuit_breaker::CircuitBreaker) and
    /// [`KeyedCircuitBreaker`](crate::circuit_breaker::KeyedCircuitBreaker): the inner service's
    /// outcome, or [`CircuitOpen`] at once when the call was refused.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct CircuitBreakerFuture<F, C> {
        #[pin]
        state: State<F>,
        // `None` once the outcome is recorded, or when the call was refused.
        ticket: Option<Ticket<C>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Called {
            #[pin]
            future: F,
        },
        Refused {
            error: Option<CircuitOpen>,
        },
    }
}

/// A breaker handed to one call, from the moment a keyed layer looked it up until the call is
/// refused or its ticket dropped. A keyed layer counts these leases and evicts no breaker that
/// has any, so an outcome is always recorded against the breaker the layer keeps for its
/// authority; a breaker that is never evicted hands out uncounted ones.
pub(crate) struct Lease<C> {
    shared: Arc<Shared<C>>,
    counted: bool,
}

impl<C> Lease<C> {
    /// A lease on a breaker that is never evicted.
    pub(crate) fn uncounted(shared: Arc<Shared<C>>) -> Self {
        Self {
            shared,
            counted: false,
        }
    }

    /// A counted lease. Taken under the lock eviction takes, so that no breaker is evicted
    /// between its look-up and the count.
    pub(crate) fn counted(shared: Arc<Shared<C>>) -> Self {
        shared.breaker.lend();
        Self {
            shared,
            counted: true,
        }
    }
}

impl<C> Drop for Lease<C> {
    fn drop(&mut self) {
        if self.counted {
            self.shared.breaker.give_back();
        }
    }
}

/// An admitted call's claim on the breaker: its outcome is recorded against the phase it was
/// admitted in, and a half-open probe slot is freed when the ticket is dropped unused.
pub(crate) struct Ticket<C> {
    lease: Lease<C>,
    pass: Pass,
    /// The request's method, for classifiers that look at it.
    method: Method,
    recorded: bool,
}

impl<C> Ticket<C> {
    /// Asks the leased breaker whether a call made now goes through. Only for a call whose
    /// inner service was made ready: the call is made if admitted.
    pub(crate) fn admit(lease: Lease<C>, method: Method) -> Result<Self, CircuitOpen> {
        match lease.shared.breaker.admit(Instant::now) {
            Admission::Rejected(open) => Err(open),
            Admission::Admitted(pass) => Ok(Self {
                lease,
                pass,
                method,
                recorded: false,
            }),
        }
    }

    fn record<Res, E>(mut self, result: &Result<Res, E>)
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        let shared = &self.lease.shared;
        let outcome = match shared.classifier.classify(&self.method, result) {
            // The server rotating its connection is up, whatever became of the request: counted
            // as a refusal, neither way.
            Outcome::Transient if result.is_err() && is_rotation(&*shared.classifier, result) => {
                Outcome::NotSent(NotSent::Refused)
            }
            outcome => outcome,
        };
        shared.breaker.record(self.pass, outcome, Instant::now);
        self.recorded = true;
    }
}

impl<C> Drop for Ticket<C> {
    fn drop(&mut self) {
        if !self.recorded {
            self.lease.shared.breaker.release(self.pass);
        }
        // The lease goes after this, once the outcome (or the release) is in.
    }
}

impl<F, C> CircuitBreakerFuture<F, C> {
    /// A call that went through; `None` for one no breaker tracks (a keyed layer that is full).
    pub(crate) fn called(future: F, ticket: Option<Ticket<C>>) -> Self {
        Self {
            state: State::Called { future },
            ticket,
        }
    }

    pub(crate) fn refused(error: CircuitOpen) -> Self {
        Self {
            state: State::Refused { error: Some(error) },
            ticket: None,
        }
    }
}

impl<F, C, Res, E> Future for CircuitBreakerFuture<F, C>
where
    F: Future<Output = Result<Res, E>>,
    Res: RetryResponse,
    E: Into<BoxError>,
    C: Classify<Res, E>,
{
    type Output = Result<Res, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.state.project() {
            StateProj::Called { future } => {
                let result = ready!(future.poll(cx));
                if let Some(ticket) = this.ticket.take() {
                    ticket.record(&result);
                }
                Poll::Ready(result.map_err(Into::into))
            }
            StateProj::Refused { error } => {
                let error = error
                    .take()
                    .expect("CircuitBreakerFuture polled after completion");
                Poll::Ready(Err(error.into()))
            }
        }
    }
}

impl<F, C> fmt::Debug for CircuitBreakerFuture<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Refused { .. } => "refused",
        };
        f.debug_struct("CircuitBreakerFuture")
            .field("state", &state)
            .field("pass", &self.ticket.as_ref().map(|t| t.pass))
            .finish()
    }
}

/// Whether `result`, a transient error, is a rotation without proof (the classifier's
/// [`Signals::rotation`](crate::classify::Signals::rotation)): the endpoint is up.
fn is_rotation<C, Res, E>(classifier: &C, result: &Result<Res, E>) -> bool
where
    Res: RetryResponse,
    C: Classify<Res, E>,
{
    let ask = Ask::new(Outcome::Transient, &std::time::SystemTime::now);
    classifier.signals(result, &ask).rotation
}
