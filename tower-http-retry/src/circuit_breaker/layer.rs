//! [`CircuitBreakerLayer`]: one breaker, shared by every clone (its builder is in `builder.rs`).

use super::builder::CircuitBreakerLayerBuilder;
use super::check::{check_retry, RetryMismatch};
use super::config::Config;
use super::service::CircuitBreaker;
use super::state::{CircuitState, CircuitStats};
use super::template::Shared;
use crate::abort::AbortSignal;
use crate::classify::HttpClassifier;
use crate::retry::RetryLayer;
use std::fmt;
use std::sync::Arc;
use tokio::time::Instant;
use tower_layer::Layer;

/// Wraps a service in a [`CircuitBreaker`]. Every clone of the layer, and every service it
/// makes, shares one breaker: one state, one failure count, one window.
///
/// ```
/// use std::time::Duration;
/// use tower::ServiceBuilder;
/// use tower_http_retry::CircuitBreakerLayer;
/// use tower_http_retry::AbortSignal;
///
/// let wake = AbortSignal::new(); // give the same signal to the RetryLayer
/// let breaker = CircuitBreakerLayer::builder()
///     .consecutive_failures(5)
///     .failure_ratio(0.5)
///     .minimum_calls(20)
///     .window(Duration::from_secs(10))
///     .open_duration(Duration::from_secs(5))
///     .abort_signal(wake.clone())
///     .build()
///     .expect("valid breaker configuration");
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::io::Error>(http::Response::new(String::new()))
/// # });
/// let client = ServiceBuilder::new().layer(breaker).service(client);
/// # let _ = client;
/// ```
///
/// # How the breaker works
///
/// Backoff handles transient failure: the endpoint is back shortly, so wait. A breaker handles
/// sustained failure: it is not coming back shortly, so stop trying and free the concurrency. With
/// backoff and no breaker, a dead endpoint keeps every request busy for its whole retry sequence;
/// with a breaker, the calls fail fast with [`CircuitOpen`](crate::circuit_breaker::CircuitOpen)
/// until a probe shows the endpoint is back.
///
/// * **Closed**: calls go through. The circuit opens after
///   [`consecutive_failures`](CircuitBreakerLayerBuilder::consecutive_failures) in a row, or when
///   the [`failure_ratio`](CircuitBreakerLayerBuilder::failure_ratio) over a sliding
///   [`window`](CircuitBreakerLayerBuilder::window) is reached with at least
///   [`minimum_calls`](CircuitBreakerLayerBuilder::minimum_calls). A failure is what the
///   [`Classify`](crate::classify::Classify) implementation calls
///   [`Transient`](crate::Outcome::Transient) (a 503, a timeout, a refused connection) - the same
///   classifier as the retry layer's, so what is retried is what trips. A permanent outcome (a 404,
///   the caller's fault) is not counted; a success ends a run of failures.
/// * **Open**: calls fail at once with [`CircuitOpen`](crate::circuit_breaker::CircuitOpen),
///   without reaching the inner service, for the open duration plus jitter (drawn from a
///   [`RandomSource`](crate::retry::RandomSource), so a fleet that tripped together does not probe
///   together), growing each time a probe fails or the circuit trips again within a window of
///   closing. `poll_ready` stays `Ready(Ok(()))`: a `poll_ready` error is final under tower's
///   contract.
/// * **Half-open**: a bounded number of probe calls go through at once, each holding its slot in
///   its response future (dropping the future frees it). Enough successes close the circuit; one
///   failure re-opens it.
///
/// # With the retry layer
///
/// Give both layers the same [`AbortSignal`](crate::AbortSignal): each time the breaker opens it
/// [holds](crate::AbortSignal::hold_until) the signal until it will half-open (a keyed breaker
/// does less: see [below](#waking-the-retry-layer)). Every request
/// sleeping before a retry returns its last outcome at once (with
/// [`StopReason::Held`](crate::StopReason::Held); its budget token is refunded) instead of
/// waking later only to be refused, and so does a request whose attempt fails while the circuit
/// is open (the attempt that opened it, for one), instead of starting a sleep. A hold is not a
/// shutdown: [`StopReason::Aborted`](crate::StopReason::Aborted) is kept for
/// [`AbortSignal::shutdown`](crate::AbortSignal::shutdown) and
/// [`wake_sleepers`](crate::AbortSignal::wake_sleepers).
///
/// [`HttpClassifier`](crate::HttpClassifier) classifies
/// [`CircuitOpen`](crate::circuit_breaker::CircuitOpen) as permanent *for this request*, even with
/// `unknown_errors(Outcome::Transient)`, so a refused attempt ends the request rather than being
/// retried into the open circuit; the request stops with
/// [`StopReason::CircuitOpen`](crate::StopReason::CircuitOpen), which is **not final**
/// ([`is_final`](crate::StopReason::is_final) is `false`): the endpoint is failing, not the
/// request, and [`RetryReport::resend_after`](crate::RetryReport::resend_after) says when the
/// breaker lets a probe through. Neither `Held` nor `CircuitOpen` is final: a sender redelivers
/// both. [`CircuitBreakerLayer::check_retry`] checks that a single request's retry sequence is long
/// enough to trip the breaker, and that the circuit half-opens within the retry layer's deadline.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_http_retry::CircuitBreakerLayer;
/// use tower_http_retry::circuit_breaker::CircuitOpen;
/// use tower_http_retry::{AbortSignal, Backoff, Jitter, RetryLayer};
///
/// let wake = AbortSignal::new();
/// let retry = RetryLayer::builder()
///     .max_attempts(3)
///     .backoff(Backoff::new(Jitter::Full, Duration::from_millis(100), Duration::from_secs(2)))
///     .abort_signal(wake.clone())
///     .build()
///     .unwrap();
/// let breaker = CircuitBreakerLayer::builder()
///     .consecutive_failures(3)
///     .abort_signal(wake)
///     .build()
///     .unwrap();
/// breaker.check_retry(&retry).expect("one request's retries can trip the breaker");
///
/// // An endpoint that is down.
/// let down = service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::io::Error>(http::Response::builder().status(503).body(String::new()).unwrap())
/// });
/// let mut client = ServiceBuilder::new()
///     .timeout(Duration::from_secs(30)) // the whole request
///     .layer(retry)
///     .layer(breaker.clone())
///     .timeout(Duration::from_secs(2)) // each attempt
///     .service(down);
///
/// // Three attempts, three 503s: the last one is returned, and the circuit is now open.
/// let response = client.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap();
/// assert_eq!(response.status(), 503);
/// // The next request fails fast, without reaching the endpoint.
/// let error = client.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap_err();
/// assert!(error.downcast_ref::<CircuitOpen>().is_some());
/// # }
/// ```
///
/// # One breaker per authority
///
/// A client in front of several upstreams (a reverse proxy, a gateway) should keep calling the
/// healthy ones while one is down. [`CircuitBreakerLayerBuilder::build_per_authority`] builds a
/// [`KeyedCircuitBreakerLayer`](super::KeyedCircuitBreakerLayer): one breaker, with the builder's
/// configuration, per authority of the request URI (`host:port` as the URI writes it, compared
/// without regard to case: `example.test` and `example.test:80` are two authorities). Requests without an authority
/// (`/path`) share one breaker of their own. A refusal names its authority
/// ([`CircuitOpen::authority`](crate::circuit_breaker::CircuitOpen::authority)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_http_retry::CircuitBreakerLayer;
/// use tower_http_retry::circuit_breaker::CircuitOpen;
/// use tower_http_retry::circuit_breaker::KeyedCircuitBreakerLayer;
///
/// let breakers = CircuitBreakerLayer::builder()
///     .consecutive_failures(3)
///     .build_per_authority(KeyedCircuitBreakerLayer::DEFAULT_MAX_AUTHORITIES)
///     .unwrap();
/// // Two upstreams behind one client; one of them is down.
/// let upstreams = service_fn(|request: http::Request<String>| async move {
///     let status = if request.uri().host() == Some("down.internal") { 503 } else { 200 };
///     Ok::<_, std::io::Error>(http::Response::builder().status(status).body(String::new()).unwrap())
/// });
/// let mut client = ServiceBuilder::new().layer(breakers).service(upstreams);
/// let get = |uri: &str| http::Request::get(uri).body(String::new()).unwrap();
///
/// for _ in 0..3 {
///     client.ready().await.unwrap().call(get("http://down.internal/")).await.unwrap();
/// }
/// let error = client.ready().await.unwrap().call(get("http://down.internal/")).await.unwrap_err();
/// let open = error.downcast_ref::<CircuitOpen>().expect("failed fast");
/// assert_eq!(open.authority().unwrap().as_str(), "down.internal");
///
/// // The other upstream is still called.
/// let response = client.ready().await.unwrap().call(get("http://up.internal/")).await.unwrap();
/// assert_eq!(response.status(), 200);
/// # }
/// ```
///
/// ## How many breakers
///
/// At most `max_authorities` authorities have a breaker at once (the breaker of requests without
/// one is not counted). When a new authority comes and the map is full, one breaker is forgotten:
/// the least recently used *closed* one (if its authority comes back, its counts start again from
/// zero); when none is closed, the least recently used open one whose open period is over (a new
/// breaker would let the next call through as well, but the open duration's growth starts
/// again). A breaker that is refusing calls or probing is never forgotten: that would drop its
/// protection. So an upstream that died and is never called again holds its place only until its
/// open period ends.
///
/// When every breaker is refusing calls or probing, a call to a new authority goes through
/// *without* a breaker: it is neither refused nor counted
/// ([`untracked_calls`](super::KeyedCircuitBreakerLayer::untracked_calls) counts it), until some
/// breaker can be forgotten. Refusing it would fail an upstream nothing is known about; letting it evict
/// an open breaker would send traffic to an upstream known to be down.
///
/// A call finds its breaker under a read lock: one hash of the authority, no allocation and no
/// clock read (recency is a logical clock, advanced only when calls alternate between
/// authorities). Only the first call to an authority takes the write lock, and when the map is
/// full it also scans the map for the breaker to forget: a cost paid by calls to new
/// authorities, linear in `max_authorities`.
///
/// `poll_ready` cannot know which authority the next call is for, so it waits for the inner service
/// even when some circuit is open (see
/// [`KeyedCircuitBreaker`](crate::circuit_breaker::KeyedCircuitBreaker)).
///
/// ## Waking the retry layer
///
/// The retry layer has one [`AbortSignal`](crate::AbortSignal) for every authority. A keyed
/// breaker holds it [for its authority only](crate::AbortSignal::hold_authority_until), until
/// the circuit half-opens:
///
/// * the requests to that authority sleeping before a retry return their last outcome at once
///   ([`StopReason::Held`](crate::StopReason::Held), budget token refunded), and so does
///   a request to it whose attempt fails while the circuit is open (the one that opened it, for
///   one), as with an unkeyed breaker;
/// * requests to other authorities keep sleeping and retrying: each sleeper is woken (the signal
///   is shared), sees that the hold is not for its authority and goes back to sleep.
///
/// Without a signal nothing is woken: the sleepers of a dead upstream wait out their backoff and
/// are then refused with [`CircuitOpen`](crate::circuit_breaker::CircuitOpen), which ends the
/// request with [`StopReason::CircuitOpen`](crate::StopReason::CircuitOpen): not retried into the
/// open circuit, but not final either (the report's `resend_after` says when a probe goes through).
///
/// # Where it goes in a stack
///
/// `TimeoutLayer(total) -> RetryLayer -> CircuitBreakerLayer -> TimeoutLayer(per attempt) ->
/// client`. Inside the retry layer, the breaker sees every attempt, so a retried request counts
/// each failure and a refused retry stops the request; outside the per-attempt timeout, it counts
/// a hung attempt as a (transient) timeout. What the caller gets:
///
/// | what happened | the caller gets |
/// |---|---|
/// | a response, even a 5xx after the last attempt | `Ok(response)` |
/// | the circuit was open (at the first attempt or a retry) | `Err`, `downcast_ref::<CircuitOpen>()` |
/// | the total timeout fired | `Err`, `downcast_ref::<tower::timeout::error::Elapsed>()` |
/// | the last attempt timed out | `Err`, `downcast_ref::<tower::timeout::error::Elapsed>()` |
/// | the last attempt's transport error | `Err`, the client's error (e.g. hyper-util's), boxed |
#[must_use]
pub struct CircuitBreakerLayer<C = HttpClassifier> {
    pub(super) shared: Arc<Shared<C>>,
}

impl CircuitBreakerLayer {
    /// The default configuration (see [`CircuitBreakerLayerBuilder`]).
    pub fn new() -> Self {
        Self::builder()
            .build()
            .expect("the default configuration is valid")
    }

    /// A builder starting from the defaults.
    pub fn builder() -> CircuitBreakerLayerBuilder {
        CircuitBreakerLayerBuilder::default()
    }

    /// The preset for callers that wait for the answer, to go under
    /// [`RetryLayer::interactive`](crate::RetryLayer::interactive): a short open duration that
    /// grows while the outage lasts. [`CircuitBreakerLayerBuilder::interactive`] starts a
    /// builder from it, to change a setting (an abort signal, say).
    ///
    /// The **open duration** is the shortest outage every caller sees once the breaker trips:
    /// for that long each call fails at once, whatever the endpoint does meanwhile. The
    /// defaults (5 to 7.5 s) suit a batch client; behind a user's click a 2 s blip becomes a
    /// 5 to 7.5 s lockout. This preset:
    ///
    /// | setter | value |
    /// |---|---|
    /// | [`consecutive_failures`](CircuitBreakerLayerBuilder::consecutive_failures) | 3 (one request's attempts in `interactive()`) |
    /// | [`open_duration`](CircuitBreakerLayerBuilder::open_duration) | 250 ms |
    /// | [`open_jitter`](CircuitBreakerLayerBuilder::open_jitter) | 0.5 (open 0.25 to 0.375 s after a first trip) |
    /// | [`open_multiplier`](CircuitBreakerLayerBuilder::open_multiplier) | 1.25: each failed probe, and each trip less than a [`window`](CircuitBreakerLayerBuilder::window) after the circuit closed, opens it a quarter longer |
    /// | [`max_open_duration`](CircuitBreakerLayerBuilder::max_open_duration) | 3 s (4.5 s with jitter: within `interactive()`'s 5 s deadline) |
    ///
    /// and the defaults for the rest (a 50 % failure ratio over 10 s with at least 20 calls,
    /// one probe). A short blip costs callers about the blip: with 20 clicks at once and one
    /// every 250 ms against an endpoint down for 2 s, the first click succeeds at 2 to 2.5 s
    /// (5.75 to 7.5 s with the defaults), and over blips of 1 to 8 s it came on average
    /// 0 to 1.2 s after the endpoint's return. A long outage is probed by one call every 3 to
    /// 4.5 s once the growth reaches its cap.
    ///
    /// ```
    /// use tower_http_retry::{CircuitBreakerLayer, RetryLayer};
    ///
    /// let breaker = CircuitBreakerLayer::interactive();
    /// breaker.check_retry(&RetryLayer::interactive()).unwrap();
    /// ```
    pub fn interactive() -> Self {
        CircuitBreakerLayerBuilder::interactive()
            .build()
            .expect("the interactive preset is valid")
    }
}

impl<C> CircuitBreakerLayer<C> {
    /// The state now.
    pub fn state(&self) -> CircuitState {
        self.shared.breaker.state(Instant::now())
    }

    /// The state and counters now.
    pub fn stats(&self) -> CircuitStats {
        self.shared.breaker.stats(Instant::now())
    }

    /// The signal woken each time the circuit opens, if one was configured.
    pub fn abort_signal(&self) -> Option<&AbortSignal> {
        self.shared.breaker.abort_signal()
    }

    pub(crate) fn config(&self) -> &Config {
        self.shared.breaker.config()
    }
}

impl<C> CircuitBreakerLayer<C> {
    /// Checks that this breaker fits the retry layer above it:
    ///
    /// * the failures of one request's retry sequence can trip it, so that an endpoint that is
    ///   down opens the circuit while requests are still sleeping between attempts (and the
    ///   [`AbortSignal`](crate::AbortSignal) wakes them), rather than after they have all run
    ///   their course ([`RetryMismatch::SlowTrip`]). The consecutive-failures trip qualifies
    ///   when it needs no more failures than `max_attempts`; the ratio trip when
    ///   `minimum_calls` attempts fit in `max_attempts` and their sleeps (taken at the
    ///   backoff's ceiling) fit in the window;
    /// * when the retry layer has a [deadline](crate::retry::RetryLayerBuilder::deadline), the
    ///   circuit half-opens within it after its first trip, jitter included
    ///   ([`RetryMismatch::OpenPastDeadline`]).
    ///
    /// ```
    /// use tower_http_retry::{CircuitBreakerLayer, RetryLayer};
    /// use tower_http_retry::circuit_breaker::RetryMismatch;
    ///
    /// let retry = RetryLayer::builder().max_attempts(3).build().unwrap();
    /// let slow = CircuitBreakerLayer::builder().consecutive_failures(10).build().unwrap();
    /// let RetryMismatch::SlowTrip(warning) = slow.check_retry(&retry).unwrap_err() else {
    ///     panic!()
    /// };
    /// assert_eq!(warning.failures_to_trip(), 10);
    ///
    /// let fast = CircuitBreakerLayer::builder().consecutive_failures(3).build().unwrap();
    /// assert!(fast.check_retry(&retry).is_ok());
    ///
    /// // A caller that waits at most 5 s, a circuit open 5 to 7.5 s (the defaults).
    /// let interactive = RetryLayer::interactive();
    /// let long = CircuitBreakerLayer::builder().consecutive_failures(3).build().unwrap();
    /// assert!(matches!(long.check_retry(&interactive), Err(RetryMismatch::OpenPastDeadline(_))));
    /// // The preset for interactive callers fits it.
    /// let short = CircuitBreakerLayer::interactive();
    /// assert!(short.check_retry(&interactive).is_ok());
    /// ```
    pub fn check_retry<R>(&self, retry: &RetryLayer<R>) -> Result<(), RetryMismatch> {
        check_retry(self.config(), retry)
    }
}

impl Default for CircuitBreakerLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> Clone for CircuitBreakerLayer<C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S, C> Layer<S> for CircuitBreakerLayer<C> {
    type Service = CircuitBreaker<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker::new(inner, Arc::clone(&self.shared))
    }
}

impl<C: fmt::Debug> fmt::Debug for CircuitBreakerLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("breaker", &self.shared.breaker)
            .field("classifier", &self.shared.classifier)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_long_open_duration_raises_the_default_cap() {
        let layer = CircuitBreakerLayer::builder()
            .open_duration(Duration::from_secs(600))
            .build()
            .unwrap();
        assert_eq!(layer.config().open.cap(), Duration::from_secs(600));
    }
}
