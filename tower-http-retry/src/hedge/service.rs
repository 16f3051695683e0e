//! [`Hedge`]: the service that may send a second copy of a slow request.

use super::config::Config;
use super::future::{HedgeFuture, Race};
use super::stats::{Event, HedgeStats};
use crate::classify::{Classify, HttpClassifier};
use crate::message::{RetryRequest, RetryResponse};
use crate::retry::RetryBudget;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;
use tower_service::Service;

/// Hedges slow requests to the inner service. Made by [`HedgeLayer`](super::HedgeLayer).
///
/// `poll_ready` delegates to the inner service, and the first copy goes to the service that was
/// made ready; a hedge goes to a clone polled to readiness when its delay is over (a copy of
/// the request is kept until then), so no permit is held while waiting.
///
/// # Clone
///
/// Cloning clones the inner service and shares the configuration, the cap, the sketches and the
/// counters.
pub struct Hedge<S, C = HttpClassifier> {
    inner: S,
    config: Arc<Config<C>>,
}

impl<S, C> Hedge<S, C> {
    pub(crate) fn new(inner: S, config: Arc<Config<C>>) -> Self {
        Self { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the service, returning the inner one.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The counters of the layer that made this service, now.
    pub fn stats(&self) -> HedgeStats {
        self.config.counters.snapshot()
    }
}

impl<S, C, Req> Service<Req> for Hedge<S, C>
where
    S: Service<Req> + Clone,
    S::Response: RetryResponse,
    Req: RetryRequest,
    C: Classify<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = HedgeFuture<S, Req, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let config = &self.config;
        config.counters.count(Event::Request);
        config.charges.cap.deposit();
        let now = Instant::now();
        let endpoint = match config.fixed_delay {
            Some(_) => None,
            None => {
                let authority = request.authority();
                config
                    .sketches
                    .get(authority.as_deref(), &config.rules, now)
            }
        };
        // The copy first: a request that cannot be copied is never armed, so it does not
        // dilute the brownout's count of armed requests.
        let copy = if config
            .idempotency
            .allows(request.method(), request.headers())
        {
            request.try_clone()
        } else {
            None
        };
        let delay = copy
            .as_ref()
            .and_then(|_| match (config.fixed_delay, &endpoint) {
                (Some(delay), _) => Some(delay),
                (None, Some(endpoint)) => endpoint.sketch().arm(&config.rules, now),
                (None, None) => None,
            });
        match (delay, copy) {
            (Some(delay), Some(copy)) => {
                config.counters.count(Event::Armed);
                let clone = self.inner.clone();
                let mut ready = std::mem::replace(&mut self.inner, clone);
                let method = request.method().clone();
                let authority = request.authority().map(Cow::into_owned);
                let first = ready.call(request);
                let race = Box::new(Race::new(ready, copy, method, authority, delay, now));
                HedgeFuture::new(first, Some(race), endpoint, Arc::clone(config), now)
            }
            _ => {
                let first = self.inner.call(request);
                HedgeFuture::new(first, None, endpoint, Arc::clone(config), now)
            }
        }
    }
}

impl<S: Clone, C> Clone for Hedge<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for Hedge<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hedge")
            .field("inner", &self.inner)
            .field("config", &*self.config)
            .finish()
    }
}
