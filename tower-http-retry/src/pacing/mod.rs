//! Endpoint pacing: after an outage, requests to a failing endpoint wait in its queue and are
//! let through by probes, then by a rate that ramps up, instead of firing on their own timers
//! or being refused by the budget. [`Pacing`] (or [`PacingBuilder`]) configures it for
//! [`RetryLayerBuilder::pacing`](crate::retry::RetryLayerBuilder::pacing);
//! [`RetryLayer::pacing_stats`](crate::RetryLayer::pacing_stats) reads an endpoint's state
//! ([`PacingStats`], its [`PacingMode`]). How it works, with the numbers, is written on
//! [`Pacing`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_http_retry::pacing::PacingMode;
//! use tower_http_retry::{Pacing, RetryLayer};
//!
//! let layer = RetryLayer::builder()
//!     .pacing(Pacing::builder().outage_after(3).build().unwrap())
//!     .build()
//!     .unwrap();
//! let down = service_fn(|_: http::Request<String>| async {
//!     Ok::<_, std::io::Error>(http::Response::builder().status(503).body(String::new()).unwrap())
//! });
//! let client = ServiceBuilder::new().layer(layer.clone()).service(down);
//! let request = http::Request::get("http://api.example.com/").body(String::new()).unwrap();
//! assert_eq!(client.oneshot(request).await.unwrap().status(), 503);
//! // Three 503s in a row: the endpoint is down, and its next requests wait for a probe.
//! let endpoint = "api.example.com".parse().unwrap();
//! assert_eq!(layer.pacing_stats(Some(&endpoint)).unwrap().mode, PacingMode::Probing);
//! # }
//! ```

// `rate.rs` is the arithmetic of the rate, `schedule.rs` of the predicted releases, `shared/`
// the rules (an endpoint's state as a fleet shares it, pure, with `now` passed in),
// `mode.rs` the modes, `endpoint/` what one process holds of an endpoint (its queue, its run
// of congestion, the rules' state or its replica of the fleet's, and with a store its link to
// the fleet: `link.rs` and `fleet.rs`), `pass.rs` what the endpoint answers the head of its
// queue, `handle.rs` an endpoint behind its lock and the retry layer's handle of it,
// `endpoints.rs` the bounded map of endpoints, and `queue.rs` what a request holds of one (its
// place in the queue, its pass); `rules.rs` the checked rules, apart from the store. `store/`
// keeps the shared state for a fleet (in process, and the `remote` kit a Redis store builds
// on).

mod clock;
mod config;
mod endpoint;
mod endpoints;
mod handle;
mod limit;
mod mode;
mod pass;
mod queue;
mod rate;
mod rules;
mod schedule;
mod shared;
pub mod store;

pub use config::{Pacing, PacingBuilder};
pub use endpoints::PacingStats;
pub use limit::AdaptiveConcurrency;
pub use mode::PacingMode;
pub use rules::PacingRules;

pub(crate) use endpoints::{key as endpoint_key, Pacer};
pub(crate) use handle::Lane;
pub(crate) use queue::{Deferred, PassGuard, QueueWait};
pub(crate) use schedule::Resend;
pub(crate) use shared::Signal;
