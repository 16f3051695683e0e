//! Endpoint pacing: [`Pacing`](crate::Pacing) configures it, the retry layer consults it. After
//! an outage, requests to a failing endpoint wait in its queue and are let through by probes,
//! then by a rate that ramps up, instead of firing on their own timers or being refused.
//!
//! `rate.rs` is the arithmetic of the rate, `endpoint.rs` one endpoint's state machine (both
//! pure, with `now` passed in), `endpoints.rs` the bounded map of endpoints and what a request
//! holds of one (its place in the queue, its pass). What users read is on
//! [`Pacing`](crate::Pacing).

mod config;
mod endpoint;
mod endpoints;
mod rate;

pub use config::{Pacing, PacingBuilder};
pub use endpoint::PacingMode;
pub use endpoints::PacingStats;

pub(crate) use endpoint::Signal;
pub(crate) use endpoints::{Deferred, Endpoint, Pacer, PassGuard, QueueWait};
