//! [`Retry`]: the service that sends each request until it succeeds or there is reason to stop.

use super::config::Config;
use super::future::RetryFuture;
use super::hand_back::{HandBack, SendAnyway, Sorting};
use super::session::{First, Session};
use super::stats::RetryStats;
use crate::classify::{Classify, HttpClassifier};
use crate::message::{RetryRequest, RetryResponse};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Retries transient failures of the inner service. Made by [`RetryLayer`](crate::RetryLayer).
///
/// `poll_ready` delegates to the inner service, and the first attempt goes to the service that
/// was made ready. Before every retry, a stored clone of the inner service is polled to readiness
/// again, after the sleep, so that no concurrency permit or buffer slot is held while sleeping.
///
/// # Clone
///
/// Cloning clones the inner service and shares the configuration, budget and counters.
/// Each request keeps one clone of the inner service for its retries; a request that cannot be
/// retried (`max_attempts == 1`) keeps none and copies nothing, unless a first-attempt jitter
/// delays it (the delayed attempt goes to a clone made ready after the delay). A POST without a
/// key keeps both: it is sent again if it provably never reached the server
/// ([`NotSent`](crate::classify::NotSent)).
///
/// `C` is the layer's classifier, `H` what it returns for a request it did not send
/// ([`HandBack`]).
pub struct Retry<S, C = HttpClassifier, H = SendAnyway> {
    inner: S,
    config: Arc<Config<Sorting<C, H>>>,
}

impl<S, C, H> Retry<S, C, H> {
    pub(crate) fn new(inner: S, config: Arc<Config<Sorting<C, H>>>) -> Self {
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

    /// Consumes the retry service, returning the inner one.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The counters of the layer that made this service, and of every service it made, now.
    pub fn stats(&self) -> RetryStats {
        self.config.counters.snapshot()
    }
}

impl<S, C, H, Req> Service<Req> for Retry<S, C, H>
where
    S: Service<Req> + Clone,
    S::Response: RetryResponse,
    // 'static: an attempt's span names the error's type, found inside a box.
    S::Error: 'static,
    Req: RetryRequest,
    C: Classify<S::Response, S::Error>,
    H: HandBack<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = RetryFuture<S, Req, C, H>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Req) -> Self::Future {
        let mut session = Session::new(Arc::clone(&self.config), &mut request);
        match session.first(&request) {
            First::Gated => {
                // The endpoint is down: the first attempt waits in its queue, holding nothing
                // (as with the first-attempt jitter below). It joins the queue when first polled.
                let fresh = self.inner.clone();
                drop(std::mem::replace(&mut self.inner, fresh));
                session.store(request);
                RetryFuture::gated(session, self.inner.clone())
            }
            First::Delayed => {
                // The attempt goes to a clone made ready after the delay. The readied service is
                // dropped now: kept here, whatever it reserved (a concurrency permit, a buffer
                // slot) would be held through the delay, and the delayed attempt could wait on
                // it forever.
                let fresh = self.inner.clone();
                drop(std::mem::replace(&mut self.inner, fresh));
                session.store(request);
                RetryFuture::delayed(session, self.inner.clone())
            }
            First::Now { keep_service: true } => {
                let clone = self.inner.clone();
                let mut ready = std::mem::replace(&mut self.inner, clone);
                let sending = session.sending(&mut request);
                let mark = sending.mark();
                let future = sending.sent(ready.call(request));
                RetryFuture::calling(session, future, mark, Some(ready))
            }
            First::Now {
                keep_service: false,
            } => {
                let sending = session.sending(&mut request);
                let mark = sending.mark();
                let future = sending.sent(self.inner.call(request));
                RetryFuture::calling(session, future, mark, None)
            }
        }
    }
}

impl<S: Clone, C, H> Clone for Retry<S, C, H> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, C: fmt::Debug, H: fmt::Debug> fmt::Debug for Retry<S, C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("inner", &self.inner)
            .field("config", &*self.config)
            .finish()
    }
}
