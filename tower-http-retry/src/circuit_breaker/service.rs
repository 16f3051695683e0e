//! [`CircuitBreaker`]: the service that admits, refuses and reports calls.

use super::future::{CircuitBreakerFuture, Lease, Ticket};
use super::state::{CircuitState, CircuitStats};
use super::template::Shared;
use crate::classify::{Classify, HttpClassifier};
use crate::message::{RequestHead, RetryResponse};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;
use tower::BoxError;
use tower_service::Service;

/// Fails calls fast while the endpoint behind it is failing. Made by
/// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer).
///
/// # Readiness
///
/// While the circuit is open, `poll_ready` returns `Ready(Ok(()))` at once without polling the
/// inner service (whose readiness would not be used), and `call` returns a future that fails with
/// [`CircuitOpen`](crate::circuit_breaker::CircuitOpen). tower's contract makes a `poll_ready`
/// error final, so an open circuit, which is temporary, never shows there. Otherwise `poll_ready`
/// delegates to the inner service and passes its errors on.
///
/// If the circuit half-opens between `poll_ready` (which saw it open and did not ready the inner
/// service) and `call`, the call is refused all the same, without taking a probe slot; the
/// [`CircuitOpen`](crate::circuit_breaker::CircuitOpen) says so, with a zero
/// [`retry_after`](crate::circuit_breaker::CircuitOpen::retry_after): the next call may probe.
///
/// If the circuit refuses a call for which `poll_ready` made the inner service ready (it opened
/// in between), the readied inner service is dropped for a fresh clone: what its readiness held
/// (a `ConcurrencyLimit` permit, a `Buffer` slot) goes back to the other clones at once rather
/// than at this clone's next call. That is why the inner service must be `Clone`.
///
/// # Clone
///
/// Clones share the breaker and clone the inner service; a clone starts un-ready.
pub struct CircuitBreaker<S, C = HttpClassifier> {
    inner: S,
    shared: Arc<Shared<C>>,
    polled: Polled,
}

/// What the last `poll_ready` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Polled {
    /// Nothing since the last call.
    No,
    /// The circuit was open: the inner service was not polled.
    Refusing,
    /// The inner service is ready.
    Ready,
}

impl<S, C> CircuitBreaker<S, C> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<C>>) -> Self {
        Self {
            inner,
            shared,
            polled: Polled::No,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the breaker service, returning the inner one.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The state of the shared breaker now.
    pub fn state(&self) -> CircuitState {
        self.shared.breaker.state(Instant::now())
    }

    /// The state and counters of the shared breaker now.
    pub fn stats(&self) -> CircuitStats {
        self.shared.breaker.stats(Instant::now())
    }
}

impl<S, C, Req> Service<Req> for CircuitBreaker<S, C>
where
    S: Service<Req> + Clone,
    S::Response: RetryResponse,
    S::Error: Into<BoxError>,
    Req: RequestHead,
    C: Classify<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = CircuitBreakerFuture<S::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.polled == Polled::Ready {
            // Ready stays ready until `call`: an opening meanwhile is handled there, without
            // throwing the inner service's readiness away.
            return Poll::Ready(Ok(()));
        }
        if self.shared.breaker.refuses(Instant::now) {
            self.polled = Polled::Refusing;
            return Poll::Ready(Ok(()));
        }
        match self.inner.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                self.polled = Polled::Ready;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error.into())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let open = match std::mem::replace(&mut self.polled, Polled::No) {
            Polled::No => panic!("poll_ready must be called before call"),
            // The inner service was not made ready: this call cannot be sent, whatever the
            // circuit says now.
            Polled::Refusing => self.shared.breaker.refuse_unready(Instant::now()),
            Polled::Ready => {
                let lease = Lease::uncounted(Arc::clone(&self.shared));
                match Ticket::admit(lease, request.method().clone()) {
                    Ok(ticket) => {
                        let future = self.inner.call(request);
                        return CircuitBreakerFuture::called(future, Some(ticket));
                    }
                    Err(open) => {
                        // Gives back what the readiness holds (a clone starts un-ready).
                        self.inner = self.inner.clone();
                        open
                    }
                }
            }
        };
        CircuitBreakerFuture::refused(open)
    }
}

impl<S: Clone, C> Clone for CircuitBreaker<S, C> {
    fn clone(&self) -> Self {
        Self::new(self.inner.clone(), Arc::clone(&self.shared))
    }
}

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for CircuitBreaker<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("inner", &self.inner)
            .field("breaker", &self.shared.breaker)
            .finish_non_exhaustive()
    }
}
