//! A circuit breaker that shares the retry layer's classifier and wakes its sleeping retries.
//!
//! Backoff handles transient failure: the endpoint is back shortly, so wait. A breaker handles
//! sustained failure: it is not coming back shortly, so stop trying and free the concurrency.
//! With backoff and no breaker, a dead endpoint keeps every request busy for its whole retry
//! sequence; with a breaker, the calls fail fast with [`CircuitOpen`] until a probe shows the
//! endpoint is back.
//!
//! * **Closed**: calls go through. The circuit opens after
//!   [`consecutive_failures`](CircuitBreakerLayerBuilder::consecutive_failures) in a row, or when
//!   the [`failure_ratio`](CircuitBreakerLayerBuilder::failure_ratio) over a sliding
//!   [`window`](CircuitBreakerLayerBuilder::window) is reached with at least
//!   [`minimum_calls`](CircuitBreakerLayerBuilder::minimum_calls). A failure is what the
//!   [`Classify`](crate::Classify) implementation calls [`Transient`](crate::Outcome::Transient)
//!   (a 503, a timeout, a refused connection) - the same classifier as the retry layer's, so what
//!   is retried is what trips. A permanent outcome (a 404, the caller's fault) is not counted; a
//!   success ends a run of failures.
//! * **Open**: calls fail at once with [`CircuitOpen`], without reaching the inner service, for
//!   the open duration plus jitter (drawn from a [`RandomSource`](crate::RandomSource), so a fleet
//!   that tripped together does not probe together), growing each time a probe fails.
//!   `poll_ready` stays `Ready(Ok(()))`: a `poll_ready` error is final under tower's contract.
//! * **Half-open**: a bounded number of probe calls go through at once, each holding its slot in
//!   its response future (dropping the future frees it). Enough successes close the circuit; one
//!   failure re-opens it.
//!
//! # With the retry layer
//!
//! Give both layers the same [`AbortSignal`](crate::AbortSignal): each time the breaker opens it
//! [holds](crate::AbortSignal::hold_until) the signal until it will half-open (a keyed breaker
//! does less: see [below](#waking-the-retry-layer)). Every request
//! sleeping before a retry returns its last outcome at once (with
//! [`StopReason::Aborted`](crate::StopReason::Aborted); its budget token is refunded) instead of
//! waking later only to be refused, and so does a request whose attempt fails while the circuit
//! is open (the attempt that opened it, for one), instead of starting a sleep. [`HttpClassifier`](crate::HttpClassifier) classifies
//! [`CircuitOpen`] as permanent, even with `unknown_errors(Outcome::Transient)`, so a refused
//! attempt ends the request rather than being retried. [`CircuitBreakerLayer::check_retry`]
//! checks that a single request's retry sequence is long enough to trip the breaker.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_http_retry::circuit_breaker::{CircuitBreakerLayer, CircuitOpen};
//! use tower_http_retry::{AbortSignal, Backoff, Jitter, RetryLayer};
//!
//! let wake = AbortSignal::new();
//! let retry = RetryLayer::builder()
//!     .max_attempts(3)
//!     .backoff(Backoff::new(Jitter::Full, Duration::from_millis(100), Duration::from_secs(2)))
//!     .abort_signal(wake.clone())
//!     .build()
//!     .unwrap();
//! let breaker = CircuitBreakerLayer::builder()
//!     .consecutive_failures(3)
//!     .abort_signal(wake)
//!     .build()
//!     .unwrap();
//! breaker.check_retry(&retry).expect("one request's retries can trip the breaker");
//!
//! // An endpoint that is down.
//! let down = service_fn(|_: http::Request<String>| async {
//!     Ok::<_, std::io::Error>(http::Response::builder().status(503).body(String::new()).unwrap())
//! });
//! let mut client = ServiceBuilder::new()
//!     .timeout(Duration::from_secs(30)) // the whole request
//!     .layer(retry)
//!     .layer(breaker.clone())
//!     .timeout(Duration::from_secs(2)) // each attempt
//!     .service(down);
//!
//! // Three attempts, three 503s: the last one is returned, and the circuit is now open.
//! let response = client.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap();
//! assert_eq!(response.status(), 503);
//! // The next request fails fast, without reaching the endpoint.
//! let error = client.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap_err();
//! assert!(error.downcast_ref::<CircuitOpen>().is_some());
//! # }
//! ```
//!
//! # One breaker per authority
//!
//! A client in front of several upstreams (a reverse proxy, a gateway) should keep calling the
//! healthy ones while one is down. [`CircuitBreakerLayerBuilder::build_per_authority`] builds a
//! [`KeyedCircuitBreakerLayer`]: one breaker, with the builder's configuration, per authority of
//! the request URI (`host:port` as the URI writes it, compared without regard to case:
//! `example.test` and `example.test:80` are two authorities). Requests without an authority
//! (`/path`) share one breaker of their own. A refusal names its authority
//! ([`CircuitOpen::authority`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_http_retry::circuit_breaker::{CircuitBreakerLayer, CircuitOpen};
//! use tower_http_retry::KeyedCircuitBreakerLayer;
//!
//! let breakers = CircuitBreakerLayer::builder()
//!     .consecutive_failures(3)
//!     .build_per_authority(KeyedCircuitBreakerLayer::DEFAULT_MAX_AUTHORITIES)
//!     .unwrap();
//! // Two upstreams behind one client; one of them is down.
//! let upstreams = service_fn(|request: http::Request<String>| async move {
//!     let status = if request.uri().host() == Some("down.internal") { 503 } else { 200 };
//!     Ok::<_, std::io::Error>(http::Response::builder().status(status).body(String::new()).unwrap())
//! });
//! let mut client = ServiceBuilder::new().layer(breakers).service(upstreams);
//! let get = |uri: &str| http::Request::get(uri).body(String::new()).unwrap();
//!
//! for _ in 0..3 {
//!     client.ready().await.unwrap().call(get("http://down.internal/")).await.unwrap();
//! }
//! let error = client.ready().await.unwrap().call(get("http://down.internal/")).await.unwrap_err();
//! let open = error.downcast_ref::<CircuitOpen>().expect("failed fast");
//! assert_eq!(open.authority().unwrap().as_str(), "down.internal");
//!
//! // The other upstream is still called.
//! let response = client.ready().await.unwrap().call(get("http://up.internal/")).await.unwrap();
//! assert_eq!(response.status(), 200);
//! # }
//! ```
//!
//! ## How many breakers
//!
//! At most `max_authorities` authorities have a breaker at once (the breaker of requests without
//! one is not counted). When a new authority comes and the map is full, one breaker is forgotten:
//! the least recently used *closed* one (if its authority comes back, its counts start again from
//! zero); when none is closed, the least recently used open one whose open period is over (a new
//! breaker would let the next call through as well, but the open duration's growth starts
//! again). A breaker that is refusing calls or probing is never forgotten: that would drop its
//! protection. So an upstream that died and is never called again holds its place only until its
//! open period ends.
//!
//! When every breaker is refusing calls or probing, a call to a new authority goes through
//! *without* a breaker: it is neither refused nor counted
//! ([`untracked_calls`](KeyedCircuitBreakerLayer::untracked_calls) counts it), until some breaker
//! can be forgotten. Refusing it would fail an upstream nothing is known about; letting it evict
//! an open breaker would send traffic to an upstream known to be down.
//!
//! A call finds its breaker under a read lock: one hash of the authority, no allocation and no
//! clock read (recency is a logical clock, advanced only when calls alternate between
//! authorities). Only the first call to an authority takes the write lock, and when the map is
//! full it also scans the map for the breaker to forget: a cost paid by calls to new
//! authorities, linear in `max_authorities`.
//!
//! `poll_ready` cannot know which authority the next call is for, so it waits for the inner
//! service even when some circuit is open (see [`KeyedCircuitBreaker`]).
//!
//! ## Waking the retry layer
//!
//! The retry layer has one [`AbortSignal`](crate::AbortSignal) for every authority. A keyed
//! breaker holds it [for its authority only](crate::AbortSignal::hold_authority_until), until
//! the circuit half-opens:
//!
//! * the requests to that authority sleeping before a retry return their last outcome at once
//!   ([`StopReason::Aborted`](crate::StopReason::Aborted), budget token refunded), and so does
//!   a request to it whose attempt fails while the circuit is open (the one that opened it, for
//!   one), as with an unkeyed breaker;
//! * requests to other authorities keep sleeping and retrying: each sleeper is woken (the signal
//!   is shared), sees that the hold is not for its authority and goes back to sleep.
//!
//! Without a signal nothing is woken: the sleepers of a dead upstream wait out their backoff and
//! are then refused with [`CircuitOpen`], which ends the request (it is permanent for the call).
//!
//! # Where it goes in a stack
//!
//! `TimeoutLayer(total) -> RetryLayer -> CircuitBreakerLayer -> TimeoutLayer(per attempt) ->
//! client`. Inside the retry layer, the breaker sees every attempt, so a retried request counts
//! each failure and a refused retry stops the request; outside the per-attempt timeout, it counts
//! a hung attempt as a (transient) timeout. What the caller gets:
//!
//! | what happened | the caller gets |
//! |---|---|
//! | a response, even a 5xx after the last attempt | `Ok(response)` |
//! | the circuit was open (at the first attempt or a retry) | `Err`, `downcast_ref::<CircuitOpen>()` |
//! | the total timeout fired | `Err`, `downcast_ref::<tower::timeout::error::Elapsed>()` |
//! | the last attempt timed out | `Err`, `downcast_ref::<tower::timeout::error::Elapsed>()` |
//! | the last attempt's transport error | `Err`, the client's error (e.g. hyper-util's), boxed |

mod authorities;
mod check;
mod error;
mod future;
mod keyed;
mod layer;
mod service;
mod state;
mod window;

pub use check::SlowTrip;
pub use error::CircuitOpen;
pub use future::ResponseFuture;
pub use keyed::{KeyedCircuitBreaker, KeyedCircuitBreakerLayer};
pub use layer::{CircuitBreakerLayer, CircuitBreakerLayerBuilder};
pub use service::CircuitBreaker;
pub use state::{CircuitState, CircuitStats};
