//! The circuit breaker: [`CircuitBreakerLayer`] (configured with
//! [`CircuitBreakerLayerBuilder`], or the [`interactive`](CircuitBreakerLayer::interactive)
//! preset) makes [`CircuitBreaker`] services, whose [`CircuitBreakerFuture`] records each
//! outcome; [`KeyedCircuitBreakerLayer`] keeps one breaker per authority
//! ([`KeyedCircuitBreaker`]). [`CircuitState`] and [`CircuitStats`] say where a breaker stands;
//! a call it refuses fails with [`CircuitOpen`]; [`CircuitBreakerLayer::check_retry`] says
//! whether it fits the retry layer above it ([`RetryMismatch`]: [`SlowTrip`],
//! [`OpenPastDeadline`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_http_retry::circuit_breaker::{CircuitOpen, CircuitState};
//! use tower_http_retry::CircuitBreakerLayer;
//!
//! let breaker = CircuitBreakerLayer::builder().consecutive_failures(2).build().unwrap();
//! let down = service_fn(|_: http::Request<String>| async {
//!     Err::<http::Response<String>, _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
//! });
//! let client = ServiceBuilder::new().layer(breaker.clone()).service(down);
//! for _ in 0..2 {
//!     let _ = client.clone().oneshot(http::Request::new(String::new())).await;
//! }
//! assert!(matches!(breaker.state(), CircuitState::Open { .. }));
//! let refused = client.oneshot(http::Request::new(String::new())).await.unwrap_err();
//! assert!(refused.downcast_ref::<CircuitOpen>().is_some());
//! # }
//! ```
//!
//! It is built to sit under the retry layer, so it may use what [`retry`](crate::retry)
//! offers; `retry` never names it. Where it goes in a stack, and why, is written on
//! [`CircuitBreakerLayer`], where rustdoc shows it.

mod authorities;
mod check;
mod config;
mod future;
mod keyed;
mod layer;
mod service;
mod state;
mod template;
mod window;

pub use crate::error::CircuitOpen;
pub use check::{OpenPastDeadline, RetryMismatch, SlowTrip};
pub use future::CircuitBreakerFuture;
pub use keyed::{KeyedCircuitBreaker, KeyedCircuitBreakerLayer};
pub use layer::{CircuitBreakerLayer, CircuitBreakerLayerBuilder};
pub use service::CircuitBreaker;
pub use state::{CircuitState, CircuitStats};
