//! A pool of upstreams behind one client, with one hint scope per upstream: [`PoolLayer`].
//!
//! A reverse proxy over several upstreams puts the pool **under** the retry layer, so that a
//! retry may go to another upstream. A server's hint (`Retry-After`, a rate-limit reset) then
//! belongs to the upstream that sent it, not to the request: the retry layer cannot know where
//! the balancer will send the next attempt, so the pool keeps the hint, per upstream, and
//! consults it when it chooses the next attempt's upstream.
//!
//! * Each request goes to the next upstream in turn (round robin) that is not held: its URI's
//!   authority (and, if it has none, its scheme) is set to that upstream's.
//! * A `429` or `5xx` with a hint holds its upstream for that long (at most
//!   [`max_hold`](PoolLayer::max_hold)), and is marked [`UpstreamHeld`](crate::hint::UpstreamHeld):
//!   the retry layer does not wait for that hint, and its next attempt goes to another upstream
//!   after the usual backoff.
//! * When every upstream is held, the call fails at once with a
//!   [`CircuitOpen`](crate::circuit_breaker::CircuitOpen) whose
//!   [`retry_after`](crate::circuit_breaker::CircuitOpen::retry_after) is the end of the first
//!   hold: the retry layer stops the request (it is never retried into a certain refusal), and a
//!   proxy answers `503` with that `Retry-After` (`tower_http_retry_hyper::proxy::error_response`).
//!
//! ```
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use tower_http_retry::pool::PoolLayer;
//! use tower_http_retry::RetryLayer;
//!
//! # fn client() -> impl tower::Service<http::Request<String>, Response = http::Response<String>, Error = std::io::Error> + Clone {
//! #     tower::service_fn(|_| async { Ok(http::Response::new(String::new())) })
//! # }
//! let pool = PoolLayer::new(["10.0.0.1:8080".parse()?, "10.0.0.2:8080".parse()?])?;
//! let upstream = ServiceBuilder::new()
//!     .timeout(Duration::from_secs(10))   // the whole request: what a browser waits for
//!     .layer(RetryLayer::interactive())   // 3 attempts, a 5 s deadline for the waits
//!     .layer(pool)                        // each attempt to an upstream that is not held
//!     .timeout(Duration::from_secs(2))    // each attempt
//!     .service(client());                 // e.g. hyper-util's legacy Client
//! # let _ = upstream;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A circuit breaker per upstream goes under the pool
//! ([`KeyedCircuitBreakerLayer`](crate::circuit_breaker::KeyedCircuitBreakerLayer)): the pool
//! sets the authority it keys on. The pool does not route around a breaker's refusal (it sees
//! only hints); a refused attempt is not retried by the request.

mod service;
mod upstreams;

pub use service::{Pool, PoolFuture, PoolLayer};
