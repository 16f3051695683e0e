//! Retry middleware for [tower] HTTP clients that does not turn an outage into a retry storm.
//!
//! After a shared outage, thousands of clients that failed together retry together. Jitter
//! spreads *when* their retries arrive; a budget bounds *how many* arrive. This crate does both,
//! and the rest a production client needs: outcomes classified into success, transient and
//! permanent; `Retry-After` honoured but clamped; only idempotent requests repeated (and those
//! that provably never reached the server); sleeps that end at once on shutdown; endpoint pacing
//! that makes requests to a dead endpoint wait and recover within seconds of its return; and a
//! report of what happened to every request.
//!
//! # Stacking
//!
//! ```
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use tower_http_retry::{AbortSignal, Backoff, Jitter, RetryLayer};
//!
//! # fn client() -> impl tower::Service<http::Request<String>, Response = http::Response<String>, Error = std::io::Error> + Clone {
//! #     tower::service_fn(|_| async { Ok(http::Response::new(String::new())) })
//! # }
//! let shutdown = AbortSignal::new();
//! let retry = RetryLayer::builder()
//!     .max_attempts(5)
//!     .backoff(Backoff::new(Jitter::Full, Duration::from_millis(100), Duration::from_secs(10)))
//!     .abort_signal(shutdown.clone())
//!     .build()
//!     .expect("valid retry configuration");
//!
//! let client = ServiceBuilder::new()
//!     .timeout(Duration::from_secs(60)) // the whole request, sleeps included
//!     .layer(retry)                     // retries, backoff, budget
//!     .timeout(Duration::from_secs(5))  // each attempt
//!     .service(client());               // e.g. hyper_util's legacy Client
//! # let _ = client;
//! ```
//!
//! See [`RetryLayer`] for how a request flows through the layer, why a budget, and how this
//! differs from `tower::retry`.
//!
//! A [`CircuitBreakerLayer`] goes between the retry layer and the per-attempt timeout; give both
//! the same [`AbortSignal`] so that an opening circuit ends the sleeps of the requests behind it.
//!
//! # Where things are
//!
//! The root is the front door, what a first stack needs: [`RetryLayer`], [`Backoff`],
//! [`Jitter`], [`AbortSignal`], [`CircuitBreakerLayer`], [`Pacing`], [`HttpClassifier`],
//! [`Outcome`], [`RetryReport`], [`StopReason`] and [`InvalidConfig`]. Every other item is in
//! the module of its concern, and only there (each front-door item is documented in its module
//! too):
//!
//! | module | what it holds |
//! |---|---|
//! | [`retry`] | the retry layer, its builder, service and future; backoff, budgets, idempotency, nested layers, the abort signal, the random source, the counters; the traits a request and a response implement to be retried |
//! | [`circuit_breaker`] | the circuit breaker, one per authority with the keyed layer; its state, its counters, its refusal ([`CircuitOpen`](circuit_breaker::CircuitOpen)), how it fits the retry layer |
//! | [`hedge`] | hedging: a second copy of a slow request, paid from a cap and the retry budget, gated by the pacer and the breaker; its counters |
//! | [`pacing`] | endpoint pacing: its configuration, an endpoint's mode and state |
//! | [`pool`] | a pool of upstreams under the retry layer, with one hint scope per upstream (a proxy's) |
//! | [`hint`] | what a response says about retrying (`Retry-After`, rate-limit headers, stand-down markers) and the policy that clamps and spreads it |
//! | [`classify`] | outcomes, the classifier trait, the default HTTP table, classifiers from closures, errors' `source()` chains |
//! | [`body`] | request bodies that can be sent again; transient response bodies read before a sleep |
//! | [`report`] | what happened to each request: attempts, delays, why it stopped, when to send it again |
//! | [`telemetry`] | what the `tracing` and `metrics` features emit |
//!
//! # Features
//!
//! * `hyper` (default): the classifier recognises `hyper::Error` and hyper-util's client error
//!   (and the [`SerialDispatch`](classify::SerialDispatch) marker on a connection).
//! * `tracing`: each attempt in an `attempt` span with OpenTelemetry's HTTP attributes
//!   (`http.request.resend_count` on retries, method, server address and port, status), and one
//!   `tracing` event per decision (attempt sent, delay chosen, stop).
//! * `metrics`: counters (attempts, retries by delay source, requests by stop reason, budget
//!   grants, denials and refunds, pacing mode changes), a histogram of the delays and a gauge of
//!   the pacer's queues through the `metrics` facade;
//!   `telemetry::describe_metrics` lists them.
//! * `reqwest`: [`RequestHead`](retry::RequestHead), [`RetryRequest`](retry::RetryRequest),
//!   [`RetryResponse`](retry::RetryResponse) and [`AsStdError`](classify::AsStdError) for
//!   `reqwest::Request`, `reqwest::Response` and `reqwest::Error`, so the layers wrap reqwest's
//!   `Client` (a tower `Service`). See [Retrying reqwest](RetryLayer#retrying-reqwest).
//!
//! # Companion crates
//!
//! What carries a fast-moving public dependency is a crate of its own, on this crate's public
//! seams only (this crate names none of them):
//!
//! * `tower-http-retry-hyper`: hyper-util's legacy client made safe for HTTP/2 connection
//!   rotation (a `GOAWAY` resent for any method, never a request applied twice); its
//!   connections carry the [`SerialDispatch`](classify::SerialDispatch) marker.
//! * `tower-http-retry-grpc`: retrying gRPC calls (tonic's `Channel`) by the gRPC rules, through
//!   the [attempt hook](retry::AttemptHook) and the [`Classify`](classify::Classify) trait.
//! * `tower-http-retry-redis`: the fleet-shared pacing state in Redis, a
//!   [`PacingStore`](pacing::store::PacingStore).
//! * `tower-http-retry-reqwest-middleware`: the retry layer as a reqwest-middleware
//!   `Middleware`, in place of reqwest-retry's `RetryTransientMiddleware`.
//!
//! [tower]: https://docs.rs/tower

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod abort;
pub mod body;
pub mod circuit_breaker;
pub mod classify;
mod endpoints;
mod error;
pub mod hedge;
pub mod hint;
mod message;
pub mod pacing;
pub mod pool;
mod random;
pub mod report;
#[cfg(feature = "reqwest")]
mod reqwest;
pub mod retry;
mod sync;
pub mod telemetry;

// The front door: what a first user reaches for, each also in its room.
#[doc(no_inline)]
pub use circuit_breaker::CircuitBreakerLayer;
#[doc(no_inline)]
pub use classify::{HttpClassifier, Outcome};
pub use error::InvalidConfig;
#[doc(no_inline)]
pub use pacing::Pacing;
#[doc(no_inline)]
pub use report::{RetryReport, StopReason};
#[doc(no_inline)]
pub use retry::{AbortSignal, Backoff, Jitter, RetryLayer};

// The README's and the guides' code blocks are compiled and run as doctests, so that they stay
// true (the guides of the companions are the companions' doctests).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/retrying.md")]
struct RetryingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/telemetry.md")]
struct TelemetryDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/hedging.md")]
struct HedgingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/pacing.md")]
struct PacingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/reliability.md")]
struct ReliabilityDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/performance.md")]
struct PerformanceDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/troubleshooting.md")]
struct TroubleshootingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/migrating.md")]
struct MigratingDoctests;
