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
                    // The headers, and a JSON body's `RetryInfo` a body reader below left.
                    let (headers, extensions) = (response.headers(), response.extensions());
                    let now = SystemTime::now();
                    let hint = settings.hints.read_answer(status, headers, extensions, now);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::RetryInfo;
    use std::sync::Mutex;
    use tower::ServiceExt;

    type Upstream = tower::util::BoxCloneSyncService<Request<String>, Response<String>, BoxError>;

    /// Upstreams that answer what `answer` makes of a 200 for the authority, logging the
    /// authority each request went to.
    fn upstreams(answer: fn(&str, &mut Response<String>)) -> (Upstream, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&log);
        let service = tower::service_fn(move |request: Request<String>| {
            let authority = request.uri().authority().map(ToString::to_string);
            let authority = authority.unwrap_or_default();
            let mut response = Response::new(String::new());
            answer(&authority, &mut response);
            seen.lock().unwrap().push(authority);
            async move { Ok::<_, BoxError>(response) }
        });
        (Upstream::new(service), log)
    }

    fn get() -> Request<String> {
        Request::get("/").body(String::new()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_retry_info_holds_its_upstream_as_a_header_does() {
        // a.test is overloaded and says so in its body only.
        let (upstream, log) = upstreams(|authority, response| {
            if authority == "a.test:80" {
                *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                let info = RetryInfo::after(Duration::from_secs(7));
                response.extensions_mut().insert(info);
            }
        });
        let addresses = ["a.test:80".parse().unwrap(), "b.test:80".parse().unwrap()];
        let pool = PoolLayer::new(addresses).unwrap().layer(upstream);
        let first = pool.clone().oneshot(get()).await.unwrap();
        assert!(
            first.extensions().get::<UpstreamHeld>().is_some(),
            "the other is free"
        );
        // a.test is held for 7 s: both next requests go to b.test.
        drop(pool.clone().oneshot(get()).await.unwrap());
        drop(pool.clone().oneshot(get()).await.unwrap());
        assert_eq!(
            *log.lock().unwrap(),
            ["a.test:80", "b.test:80", "b.test:80"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pool_of_one_leaves_the_hint_to_the_retry_layer() {
        let (upstream, _) = upstreams(|_, response| {
            *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            let after = http::HeaderValue::from_static("7");
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, after);
        });
        let pool = PoolLayer::new(["a.test:80".parse().unwrap()])
            .unwrap()
            .layer(upstream);
        let answer = pool.oneshot(get()).await.unwrap();
        assert!(
            answer.extensions().get::<UpstreamHeld>().is_none(),
            "no other upstream to take the retry: the retry layer waits the hint"
        );
    }
}
