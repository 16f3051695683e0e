//! [`RetryMiddleware`]: [tower-http-retry](tower_http_retry)'s retry layer as a
//! `reqwest_middleware::Middleware`, in place of reqwest-retry's `RetryTransientMiddleware`.
//!
//! No second retry engine: the rest of the middleware chain (`Next`) is wrapped in a tower
//! `Service` and run through [`Retry`](tower_http_retry::retry::Retry), as reqwest's `Client` is
//! with the core's `reqwest` feature.

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

use ::reqwest::{Request, Response};
use ::reqwest_middleware::{Error, Middleware, Next};
use http::uri::Authority;
use http::{Extensions, HeaderMap, Method};
use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tower_http_retry::classify::{AsStdError, Classify, HttpClassifier};
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::{
    HandBack, RequestHead, RetryLayer, RetryRequest, RetryStats, SendAnyway,
};
use tower_layer::Layer;
use tower_service::Service;

/// The retry layer as a [`reqwest_middleware::Middleware`]:
/// the same budget, backoff, `Retry-After` and rate-limit hints, pacing and reports as
/// [`RetryLayer`] has around any other client.
///
/// Swapping reqwest-retry's middleware for it is one line:
///
/// ```
/// use reqwest_middleware::ClientBuilder;
/// use tower_http_retry::RetryLayer;
/// use tower_http_retry_reqwest_middleware::RetryMiddleware;
///
/// let client = ClientBuilder::new(reqwest::Client::new())
///     // was: .with(RetryTransientMiddleware::new_with_policy(ExponentialBackoff::builder().build_with_max_retries(3)))
///     .with(RetryMiddleware::default())
///     .build();
///
/// // Any configuration of the retry layer, e.g. for a caller that waits for the answer:
/// let layer = RetryLayer::interactive();
/// let stats = layer.clone(); // counters shared with every clone
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(layer))
///     .build();
/// # let _ = (client, stats.stats());
/// ```
///
/// **What each attempt runs.** The middlewares added after this one (and the client) run once
/// per attempt; those added before it run once per request. Each attempt starts from the
/// request's extensions as the previous attempt left them, and the caller gets the last
/// attempt's.
///
/// **Reports.** A response carries its [`RetryReport`](tower_http_retry::RetryReport) ([`RetryReport::of`](tower_http_retry::RetryReport::of)). Whatever the
/// outcome, an error included, the report is also put in the request's extensions (read them
/// with `ClientWithMiddleware::execute_with_extensions`), and a [`ReportSlot`] found there is
/// filled.
///
/// **Differences from reqwest-retry's default** (`ExponentialBackoff` with 3 retries, measured
/// side by side in `tests/reqwest_middleware`): a POST or PATCH without an `Idempotency-Key` is
/// not retried; `Retry-After` and the rate-limit headers are waited for; a budget shared by every
/// request bounds the retries while a server is down; waits start at 100 ms rather than 1 s. A
/// request whose body cannot be copied (a stream) is sent once instead of failing. Errors come
/// back as the last attempt returned them, not wrapped.
///
/// `C` and `H` are the layer's classifier and [hand-back](tower_http_retry::retry::HandBack).
pub struct RetryMiddleware<C = HttpClassifier, H = SendAnyway> {
    layer: RetryLayer<C, H>,
}

impl<C, H> RetryMiddleware<C, H> {
    /// The middleware of `layer` (its clones share its counters, budget and pacing).
    pub fn new(layer: RetryLayer<C, H>) -> Self {
        Self { layer }
    }

    /// The retry layer it runs.
    pub fn layer(&self) -> &RetryLayer<C, H> {
        &self.layer
    }

    /// The counters of its retry layer, now.
    pub fn stats(&self) -> RetryStats {
        self.layer.stats()
    }
}

impl Default for RetryMiddleware {
    /// The middleware of [`RetryLayer::new`].
    fn default() -> Self {
        Self::new(RetryLayer::new())
    }
}

impl<C, H> From<RetryLayer<C, H>> for RetryMiddleware<C, H> {
    fn from(layer: RetryLayer<C, H>) -> Self {
        Self::new(layer)
    }
}

impl<C, H> Clone for RetryMiddleware<C, H> {
    fn clone(&self) -> Self {
        Self {
            layer: self.layer.clone(),
        }
    }
}

impl<C: fmt::Debug, H: fmt::Debug> fmt::Debug for RetryMiddleware<C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryMiddleware")
            .field("layer", &self.layer)
            .finish()
    }
}

#[async_trait::async_trait]
impl<C, H> Middleware for RetryMiddleware<C, H>
where
    C: Classify<Response, ChainError> + Send + Sync + 'static,
    H: HandBack<Response, ChainError> + Send + Sync + 'static,
{
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response, Error> {
        let slot = extensions.get::<ReportSlot>().cloned();
        let ours = slot.is_none();
        let slot = slot.unwrap_or_default();
        let shared = Arc::new(Mutex::new(std::mem::take(extensions)));
        let chain = Chain {
            next,
            extensions: Arc::clone(&shared),
        };
        let attempt = Attempt {
            request,
            slot: slot.clone(),
        };
        let mut retry = self.layer.layer(chain);
        let result = match std::future::poll_fn(|cx| retry.poll_ready(cx)).await {
            Ok(()) => retry.call(attempt).await,
            Err(error) => Err(error),
        }
        .map_err(|ChainError(error)| error);
        *extensions = std::mem::take(&mut *lock(&shared));
        // A slot the caller put in keeps its report for the caller.
        let report = if ours { slot.take() } else { slot.get() };
        if let Some(report) = report {
            extensions.insert(report);
        }
        result
    }
}

fn lock(extensions: &Mutex<Extensions>) -> std::sync::MutexGuard<'_, Extensions> {
    // A poisoned lock means an attempt panicked; the extensions are still whole.
    extensions.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One attempt's request, with the slot its report goes to.
struct Attempt {
    request: Request,
    slot: ReportSlot,
}

impl RequestHead for Attempt {
    fn method(&self) -> &Method {
        self.request.method()
    }

    fn headers(&self) -> &HeaderMap {
        self.request.headers()
    }

    fn headers_mut(&mut self) -> &mut HeaderMap {
        self.request.headers_mut()
    }

    fn authority(&self) -> Option<Cow<'_, Authority>> {
        RequestHead::authority(&self.request)
    }
}

impl RetryRequest for Attempt {
    fn try_clone(&self) -> Option<Self> {
        Some(Self {
            request: self.request.try_clone()?,
            slot: self.slot.clone(),
        })
    }

    fn report_slot(&self) -> Option<&ReportSlot> {
        Some(&self.slot)
    }
}

/// The rest of the middleware chain as a tower `Service`: each call runs `Next` once.
struct Chain<'a> {
    next: Next<'a>,
    extensions: Arc<Mutex<Extensions>>,
}

impl Clone for Chain<'_> {
    fn clone(&self) -> Self {
        Self {
            next: self.next.clone(),
            extensions: Arc::clone(&self.extensions),
        }
    }
}

impl<'a> Service<Attempt> for Chain<'a> {
    type Response = Response;
    type Error = ChainError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, ChainError>> + Send + 'a>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ChainError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, attempt: Attempt) -> Self::Future {
        let next = self.next.clone();
        let shared = Arc::clone(&self.extensions);
        Box::pin(async move {
            // `Next::run` borrows the extensions for the whole attempt: each attempt gets its
            // own copy, and leaves it for the next one (and the caller).
            let mut extensions = lock(&shared).clone();
            let result = next.run(attempt.request, &mut extensions).await;
            *lock(&shared) = extensions;
            result.map_err(ChainError)
        })
    }
}

/// What an attempt through the rest of the middleware chain failed with, as the retry layer's
/// classifier sees it: reqwest-middleware's [`Error`], in a type of this crate so that it can
/// give the classifier its `source()` chain ([`AsStdError`], a trait of the core, cannot be
/// implemented for reqwest-middleware's type outside the core). The caller gets the `Error`
/// itself back. A classifier of its own for [`RetryMiddleware`] implements
/// `Classify<reqwest::Response, ChainError>`.
#[derive(Debug)]
pub struct ChainError(pub Error);

/// The reqwest error itself (to find its connect, timeout and hyper errors), or a middleware's.
impl AsStdError for ChainError {
    fn as_std_error(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            Error::Reqwest(error) => Some(error),
            Error::Middleware(error) => Some(error.as_ref()),
        }
    }
}

// The guide's code blocks are compiled and run as doctests, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/reqwest-middleware.md")]
struct GuideDoctests;
