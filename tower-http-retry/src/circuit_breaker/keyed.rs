//! [`KeyedCircuitBreakerLayer`] and its service: one breaker per authority.

use super::authorities::Authorities;
use super::check::{check_retry, RetryMismatch};
use super::config::Settings;
use super::future::{CircuitBreakerFuture, Ticket};
use super::state::{CircuitState, CircuitStats};
use super::template::Template;
use crate::abort::AbortSignal;
use crate::classify::{Classify, HttpClassifier};
use crate::message::{RequestHead, RetryResponse};
use crate::retry::RetryLayer;
use http::uri::Authority;
use std::fmt;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::time::Instant;
use tower::BoxError;
use tower_layer::Layer;
use tower_service::Service;

/// Wraps a service in a [`KeyedCircuitBreaker`]: one breaker per authority of the request URI, so
/// that one dead upstream does not fail the calls to the healthy ones behind the same client. Built
/// by
/// [`CircuitBreakerLayerBuilder::build_per_authority`](crate::circuit_breaker::CircuitBreakerLayerBuilder::build_per_authority);
/// every breaker has the builder's configuration. Every clone of the layer, and every service it
/// makes, shares the breakers.
///
/// See [one breaker per authority](crate::CircuitBreakerLayer#one-breaker-per-authority) for the bound on their
/// number, what is evicted, and how an opening wakes the retry layer.
#[must_use]
pub struct KeyedCircuitBreakerLayer<C = HttpClassifier> {
    authorities: Arc<Authorities<C>>,
}

impl KeyedCircuitBreakerLayer {
    /// The bound of [`new`](Self::new): enough for a proxy in front of a fleet; a breaker takes
    /// about 0.7 KB, so under a megabyte when full.
    pub const DEFAULT_MAX_AUTHORITIES: usize = 1024;

    /// The default breaker configuration (see
    /// [`CircuitBreakerLayerBuilder`](crate::circuit_breaker::CircuitBreakerLayerBuilder)) for at
    /// most [`DEFAULT_MAX_AUTHORITIES`](Self::DEFAULT_MAX_AUTHORITIES) authorities.
    pub fn new() -> Self {
        // What `CircuitBreakerLayer::builder().build_per_authority(..)` makes, without naming
        // the unkeyed layer (which names this one).
        let template = Template::new(HttpClassifier::new(), Settings::default(), true)
            .expect("the default configuration is valid");
        Self::new_with(template, Self::DEFAULT_MAX_AUTHORITIES)
    }
}

impl Default for KeyedCircuitBreakerLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> KeyedCircuitBreakerLayer<C> {
    pub(crate) fn new_with(template: Template<C>, max_authorities: usize) -> Self {
        Self {
            authorities: Arc::new(Authorities::new(template, max_authorities)),
        }
    }

    /// The state of the breaker of `authority` now (`None`: the one shared by requests without an
    /// authority); `None` when that authority has no breaker (never called, or evicted).
    pub fn state(&self, authority: Option<&Authority>) -> Option<CircuitState> {
        self.stats(authority).map(|stats| stats.state)
    }

    /// The state and counters of the breaker of `authority`, as [`state`](Self::state) finds it.
    pub fn stats(&self, authority: Option<&Authority>) -> Option<CircuitStats> {
        let shared = self.authorities.peek(authority)?;
        Some(shared.breaker.stats(Instant::now()))
    }

    /// How many authorities have a breaker now, at most
    /// [`max_authorities`](Self::max_authorities). The breaker shared by requests without an
    /// authority is not counted.
    pub fn authorities(&self) -> usize {
        self.authorities.len()
    }

    /// The most authorities that have a breaker at once.
    pub fn max_authorities(&self) -> usize {
        self.authorities.max()
    }

    /// How many breakers were forgotten to make room for a new authority.
    pub fn evictions(&self) -> u64 {
        self.authorities.evicted()
    }

    /// How many calls went through without a breaker: their authority was new, the map was
    /// full, and every breaker in it was open, probing, or had calls in flight.
    pub fn untracked_calls(&self) -> u64 {
        self.authorities.untracked()
    }

    /// The signal woken each time one of the breakers opens, if one was configured.
    pub fn abort_signal(&self) -> Option<&AbortSignal> {
        self.authorities.template().abort_signal()
    }

    /// [`CircuitBreakerLayer::check_retry`](crate::CircuitBreakerLayer::check_retry) for the configuration every breaker shares.
    pub fn check_retry<R>(&self, retry: &RetryLayer<R>) -> Result<(), RetryMismatch> {
        check_retry(self.authorities.template().config(), retry)
    }
}

impl<C> Clone for KeyedCircuitBreakerLayer<C> {
    fn clone(&self) -> Self {
        Self {
            authorities: Arc::clone(&self.authorities),
        }
    }
}

impl<S, C> Layer<S> for KeyedCircuitBreakerLayer<C> {
    type Service = KeyedCircuitBreaker<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        KeyedCircuitBreaker {
            inner,
            authorities: Arc::clone(&self.authorities),
            ready: false,
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for KeyedCircuitBreakerLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let template = self.authorities.template();
        f.debug_struct("KeyedCircuitBreakerLayer")
            .field("config", template.config())
            .field("classifier", template.classifier())
            .field("authorities", &self.authorities())
            .field("max_authorities", &self.max_authorities())
            .finish()
    }
}

/// Fails calls to an authority fast while that authority is failing, and lets the calls to the
/// others through. Made by [`KeyedCircuitBreakerLayer`]; a service of any [`RequestHead`]
/// (`http::Request`, `reqwest::Request`).
///
/// # Readiness
///
/// `poll_ready` delegates to the inner service: it cannot tell which authority the next call is
/// for. A call to an authority whose circuit is open is refused with
/// [`CircuitOpen`](crate::circuit_breaker::CircuitOpen) (naming the authority) without reaching the
/// inner service, whose readiness is then kept for the next call. An inner service that is not
/// ready (a concurrency limit filled by calls hanging on one upstream, say) holds back the calls to
/// every authority; an unkeyed [`CircuitBreaker`](crate::circuit_breaker::CircuitBreaker) skips the
/// wait while its circuit is open.
///
/// # Clone
///
/// Clones share the breakers and clone the inner service; a clone starts un-ready.
pub struct KeyedCircuitBreaker<S, C = HttpClassifier> {
    inner: S,
    authorities: Arc<Authorities<C>>,
    ready: bool,
}

impl<S, C> KeyedCircuitBreaker<S, C> {
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
}

impl<S, C, Req> Service<Req> for KeyedCircuitBreaker<S, C>
where
    S: Service<Req>,
    S::Response: RetryResponse,
    S::Error: Into<BoxError>,
    Req: RequestHead,
    C: Classify<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = CircuitBreakerFuture<S::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let result = ready!(self.inner.poll_ready(cx)).map_err(Into::into);
        self.ready = result.is_ok();
        Poll::Ready(result)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        assert!(
            std::mem::take(&mut self.ready),
            "poll_ready must be called before call"
        );
        let authority = request.authority();
        let Some(lease) = self.authorities.breaker(authority.as_deref()) else {
            drop(authority);
            return CircuitBreakerFuture::called(self.inner.call(request), None);
        };
        match Ticket::admit(lease, request.method().clone()) {
            Ok(ticket) => {
                drop(authority);
                CircuitBreakerFuture::called(self.inner.call(request), Some(ticket))
            }
            Err(open) => CircuitBreakerFuture::refused(open.for_authority(authority.as_deref())),
        }
    }
}

impl<S: Clone, C> Clone for KeyedCircuitBreaker<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            authorities: Arc::clone(&self.authorities),
            ready: false,
        }
    }
}

impl<S: fmt::Debug, C> fmt::Debug for KeyedCircuitBreaker<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreaker")
            .field("inner", &self.inner)
            .field("authorities", &self.authorities.len())
            .finish_non_exhaustive()
    }
}
