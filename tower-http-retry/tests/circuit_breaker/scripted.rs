//! Shared helpers: a scripted endpoint, a breaker configuration without randomness, and calls
//! that report the status or the error.

use std::future::{ready, Ready};
use std::io;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_test::{assert_ready, assert_ready_ok};
use tower::{BoxError, Layer, Service, ServiceExt};
use tower_http_retry::circuit_breaker::CircuitOpen;
use tower_http_retry::circuit_breaker::{
    CircuitBreaker, CircuitBreakerFuture, CircuitBreakerLayerBuilder,
};
use tower_http_retry::retry::TokenBucket;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};
use tower_http_retry::{
    AbortSignal, Backoff, CircuitBreakerLayer, HttpClassifier, Jitter, RetryLayer,
};

pub type Req = http::Request<()>;
pub type Res = http::Response<()>;

pub const SEC: Duration = Duration::from_secs(1);
pub const MS: Duration = Duration::from_millis(1);

/// What [`Endpoint`] answers instead of a status: a refused connection.
pub const REFUSED: u16 = 0;

/// An endpoint that answers every call at once with the status it is set to (or [`REFUSED`]),
/// and counts the calls that reached it. Clones share both.
#[derive(Clone, Debug)]
pub struct Endpoint {
    answer: Arc<AtomicU16>,
    calls: Arc<AtomicU32>,
}

impl Endpoint {
    pub fn answering(code: u16) -> Self {
        Self {
            answer: Arc::new(AtomicU16::new(code)),
            calls: Arc::default(),
        }
    }

    pub fn answer(&self, code: u16) {
        self.answer.store(code, Ordering::SeqCst);
    }

    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Service<Req> for Endpoint {
    type Response = Res;
    type Error = io::Error;
    type Future = Ready<Result<Res, io::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Req) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        ready(match self.answer.load(Ordering::SeqCst) {
            REFUSED => Err(io::Error::from(io::ErrorKind::ConnectionRefused)),
            code => Ok(http::Response::builder().status(code).body(()).unwrap()),
        })
    }
}

/// A deterministic breaker: opens after 3 failures in a row (no ratio trip) for exactly 1 s,
/// doubling on each re-opening up to 8 s.
pub fn breaker() -> CircuitBreakerLayerBuilder {
    CircuitBreakerLayer::builder()
        .consecutive_failures(3)
        .without_failure_ratio()
        .open_duration(SEC)
        .max_open_duration(8 * SEC)
        .open_jitter(0.0)
        .random_source(RandomSource::seeded(1))
}

pub fn get() -> Req {
    http::Request::get("http://example.test/").body(()).unwrap()
}

pub fn post() -> Req {
    http::Request::post("http://example.test/")
        .body(())
        .unwrap()
}

/// Readies `service`, calls it with `request`, and returns the status (or the error).
pub async fn send<S>(service: &mut S, request: Req) -> Result<u16, BoxError>
where
    S: Service<Req, Response = Res, Error = BoxError>,
{
    let response = service.ready().await?.call(request).await?;
    Ok(response.status().as_u16())
}

/// `send` with a GET.
pub async fn call<S>(service: &mut S) -> Result<u16, BoxError>
where
    S: Service<Req, Response = Res, Error = BoxError>,
{
    send(service, get()).await
}

/// `n` GETs; panics unless each reached the endpoint.
pub async fn calls<S>(service: &mut S, n: usize)
where
    S: Service<Req, Response = Res, Error = BoxError>,
{
    for i in 0..n {
        if let Err(error) = call(service).await {
            assert!(
                error.downcast_ref::<CircuitOpen>().is_none(),
                "call {i} of {n} was refused"
            );
        }
    }
}

/// The [`CircuitOpen`] a refused call failed with; panics on anything else.
pub fn refused(result: Result<u16, BoxError>) -> CircuitOpen {
    match result {
        Ok(code) => panic!("expected a refusal, got {code}"),
        Err(error) => error
            .downcast_ref::<CircuitOpen>()
            .unwrap_or_else(|| panic!("expected CircuitOpen, got {error}"))
            .clone(),
    }
}

pub type Mock = tower_test::mock::Mock<Req, Res>;
pub type Handle = tower_test::mock::Handle<Req, Res>;
/// A response future of the breaker, on a mock task that records wake-ups.
pub type Fut = tokio_test::task::Spawn<
    CircuitBreakerFuture<tower_test::mock::future::ResponseFuture<Res>, HttpClassifier>,
>;

pub fn status(code: u16) -> Res {
    http::Response::builder().status(code).body(()).unwrap()
}

/// A breaker over `tower_test::mock`, whose calls stay in flight until answered.
pub struct Mocked {
    pub svc: tower_test::mock::Spawn<CircuitBreaker<Mock, HttpClassifier>>,
    pub handle: Handle,
}

impl Mocked {
    pub fn new(layer: &CircuitBreakerLayer) -> Self {
        let (svc, handle) = tower_test::mock::spawn_with(|mock| layer.layer(mock));
        Self { svc, handle }
    }

    /// Polls the breaker ready and calls it; the future is not polled yet.
    pub fn start(&mut self) -> Fut {
        assert_ready_ok!(self.svc.poll_ready());
        tokio_test::task::spawn(self.svc.call(get()))
    }

    /// Answers the oldest call waiting at the mock; panics if there is none.
    pub fn answer(&mut self, code: u16) {
        match self.handle.poll_request() {
            Poll::Ready(Some((_, reply))) => reply.send_response(status(code)),
            _ => panic!("expected a call to have reached the mock"),
        }
    }

    pub fn assert_no_call(&mut self) {
        assert!(
            self.handle.poll_request().is_pending(),
            "a call reached the mock"
        );
    }

    /// One whole call answered with `code`; returns what the breaker returned.
    pub fn round_trip(&mut self, code: u16) -> Result<u16, BoxError> {
        let mut future = self.start();
        if let Poll::Ready(result) = future.poll() {
            return result.map(|r| r.status().as_u16());
        }
        self.answer(code);
        let result = assert_ready!(future.poll());
        result.map(|r| r.status().as_u16())
    }

    /// Trips the breaker of [`breaker`] (3 failures) and waits out its open duration: the next
    /// call is a probe.
    pub async fn half_open(&mut self) {
        for _ in 0..3 {
            self.round_trip(503).unwrap();
        }
        tokio::time::advance(SEC).await;
    }
}

/// The fixed backoff of [`retry`].
pub const BACKOFF: Duration = Duration::from_secs(30);

/// Retries with a fixed 30 s backoff and a 10-token budget without refill.
pub fn retry(signal: &AbortSignal, budget: &Arc<TokenBucket>) -> RetryLayerBuilder {
    RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Jitter::None, BACKOFF, BACKOFF))
        .budget(Arc::clone(budget))
        .abort_signal(signal.clone())
}

/// A budget of 10 tokens that never refills.
pub fn bucket() -> Arc<TokenBucket> {
    let bucket = TokenBucket::builder()
        .capacity(10.0)
        .deposit_per_success(0.0)
        .refill_per_second(0.0)
        .build()
        .unwrap();
    Arc::new(bucket)
}

/// Readies `service` (it must be ready at once) and calls it; the future is not polled yet.
pub fn start<S>(service: &mut S, request: Req) -> tokio_test::task::Spawn<S::Future>
where
    S: Service<Req, Response = Res, Error = BoxError>,
{
    let mut ready = tokio_test::task::spawn(std::future::poll_fn(|cx| service.poll_ready(cx)));
    assert_ready_ok!(ready.poll());
    drop(ready);
    tokio_test::task::spawn(service.call(request))
}
