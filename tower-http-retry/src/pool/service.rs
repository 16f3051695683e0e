//! [`PoolLayer`], its service and its future: the plumbing around the pool's state.

use super::upstreams::Upstreams;
use crate::error::{CircuitOpen, InvalidConfig};
use crate::hint::{ServerHints, UpstreamHeld};
use http::uri::{Authority, Scheme, Uri};
use http::{Request, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tower::BoxError;
use tower_layer::Layer;
use tower_service::Service;

/// Sends each request to one of several upstreams, skipping those whose last answer asked to be
/// left alone (see [the module](crate::pool)). Every clone of the layer, and every service it
/// makes, shares the upstreams' holds.
#[derive(Clone, Debug)]
#[must_use]
pub struct PoolLayer {
    upstreams: Arc<Upstreams>,
    settings: Settings,
}

#[derive(Clone, Debug)]
struct Settings {
    hints: ServerHints,
    max_hold: Duration,
    scheme: Scheme,
}

impl PoolLayer {
    /// The longest an upstream is held by default: a hint of an hour holds it a minute, then the
    /// next request finds out.
    pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(60);

    /// A pool of `upstreams` (`host:port`), each request to the next in turn, over `http`, with
    /// the hints [`ServerHints::new`] reads, each held at most
    /// [`DEFAULT_MAX_HOLD`](Self::DEFAULT_MAX_HOLD). An empty list is an error.
    pub fn new(upstreams: impl IntoIterator<Item = Authority>) -> Result<Self, InvalidConfig> {
        let upstreams: Vec<Authority> = upstreams.into_iter().collect();
        if upstreams.is_empty() {
            return Err(InvalidConfig::new(
                "upstreams",
                "a pool needs at least one upstream",
            ));
        }
        Ok(Self {
            upstreams: Arc::new(Upstreams::new(upstreams)),
            settings: Settings {
                hints: ServerHints::new(),
                max_hold: Self::DEFAULT_MAX_HOLD,
                scheme: Scheme::HTTP,
            },
        })
    }

    /// The longest an upstream is held, whatever its hint says.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.settings.max_hold = max_hold;
        self
    }

    /// The hints read from each failed answer (by default [`ServerHints::new`]).
    pub fn hints(mut self, hints: ServerHints) -> Self {
        self.settings.hints = hints;
        self
    }

    /// The scheme of the upstreams, set on every request (whatever scheme its URI had): `http`
    /// by default.
    pub fn scheme(mut self, scheme: Scheme) -> Self {
        self.settings.scheme = scheme;
        self
    }
}

impl<S> Layer<S> for PoolLayer {
    type Service = Pool<S>;

    fn layer(&self, inner: S) -> Pool<S> {
        Pool {
            inner,
            upstreams: Arc::clone(&self.upstreams),
            settings: Arc::new(self.settings.clone()),
        }
    }
}

/// The service of a [`PoolLayer`].
#[derive(Clone, Debug)]
pub struct Pool<S> {
    inner: S,
    upstreams: Arc<Upstreams>,
    settings: Arc<Settings>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Pool<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
{
    type Response = Response<ResBody>;
    type Error = BoxError;
    type Future = PoolFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let now = Instant::now();
        match self.upstreams.choose(now) {
            Ok(upstream) => {
                let authority = self.upstreams.authority(upstream);
                *request.uri_mut() =
                    with_authority(request.uri(), authority, &self.settings.scheme);
                PoolFuture {
                    state: State::Sent {
                        future: self.inner.call(request),
                        upstream,
                        upstreams: Arc::clone(&self.upstreams),
                        settings: Arc::clone(&self.settings),
                    },
                }
            }
            Err(until) => PoolFuture {
                state: State::Refused {
                    refusal: Some(CircuitOpen::held(until)),
                },
            },
        }
    }
}

/// `uri` sent to `authority` over `scheme` (the upstreams', whatever the caller's was).
fn with_authority(uri: &Uri, authority: &Authority, scheme: &Scheme) -> Uri {
    let mut parts = uri.clone().into_parts();
    parts.authority = Some(authority.clone());
    parts.scheme = Some(scheme.clone());
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    Uri::from_parts(parts).expect("a scheme, an authority and a path make a URI")
}

pin_project! {
    /// The future of a [`Pool`]: the upstream's answer, its hint kept for the upstream.
    #[derive(Debug)]
    pub struct PoolFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    enum State<F> {
        Sent {
            #[pin]
            future: F,
            upstream: usize,
            upstreams: Arc<Upstreams>,
            settings: Arc<Settings>,
        },
        Refused { refusal: Option<CircuitOpen> },
    }
}

impl<F, ResBody, E> Future for PoolFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<ResBody>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Sent {
                future,
                upstream,
                upstreams,
                settings,
            } => {
                let mut response = ready!(future.poll(cx)).map_err(Into::into)?;
                let status = response.status();
                if status == http::StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
                    let hint = settings
                        .hints
                        .read(status, response.headers(), SystemTime::now());
                    if let Some(after) = hint.retry_after() {
                        let now = Instant::now();
                        upstreams.hold(*upstream, now, after, settings.max_hold);
                        // Only when another upstream can take the retry: with none, the hint
                        // is the request's to wait for, as without a pool.
                        if upstreams.another_free(*upstream, now) {
                            response.extensions_mut().insert(UpstreamHeld::new());
                        }
                    }
                }
                Poll::Ready(Ok(response))
            }
            StateProj::Refused { refusal } => Poll::Ready(Err(refusal
                .take()
                .expect("a refused pool future is polled once")
                .into())),
        }
    }
}
