//! [`ReleaseBody`]: the service that reads the bodies of transient responses before returning
//! them.

use super::body::ReleasedBody;
use super::config::Config;
use super::future::ReleaseBodyFuture;
use crate::classify::{Classify, HttpClassifier};
use crate::message::RequestHead;
use http_body::Body;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Reads the body of each response its classifier calls transient, up to a limit, before
/// returning the response; every other response is returned at once, its body untouched. Made by
/// [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer).
///
/// The response keeps its status, headers and extensions; its body becomes a
/// [`ReleasedBody`]. Errors of the inner service pass through unchanged; an error of a body while
/// it is read is kept in the [`ReleasedBody`], after the data read before it.
///
/// # Clone
///
/// Cloning clones the inner service and shares the configuration.
pub struct ReleaseBody<S, C = HttpClassifier> {
    inner: S,
    config: Arc<Config<C>>,
}

impl<S, C> ReleaseBody<S, C> {
    pub(super) fn new(inner: S, config: Arc<Config<C>>) -> Self {
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
}

impl<S, C, Req, B> Service<Req> for ReleaseBody<S, C>
where
    S: Service<Req, Response = http::Response<B>>,
    Req: RequestHead,
    B: Body,
    C: Classify<http::Response<B>, S::Error>,
{
    type Response = http::Response<ReleasedBody<B>>;
    type Error = S::Error;
    type Future = ReleaseBodyFuture<S::Future, B, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        // The classifier sees the method, as the retry layer's does.
        let method = request.method().clone();
        ReleaseBodyFuture::new(self.inner.call(request), method, Arc::clone(&self.config))
    }
}

impl<S: Clone, C> Clone for ReleaseBody<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for ReleaseBody<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseBody")
            .field("inner", &self.inner)
            .field("config", &*self.config)
            .finish()
    }
}
