//! The circuit breaker: [`CircuitBreakerLayer`](crate::CircuitBreakerLayer) (one breaker) and
//! [`KeyedCircuitBreakerLayer`](crate::KeyedCircuitBreakerLayer) (one per authority).
//!
//! It is built to sit under the retry layer, so it may use what `retry` offers; `retry` never
//! names it. What the crate docs say of the breaker is written on
//! [`CircuitBreakerLayer`](crate::CircuitBreakerLayer), where rustdoc shows it.

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
