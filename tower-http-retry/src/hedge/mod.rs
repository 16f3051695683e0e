//! Hedging: [`HedgeLayer`] (configured with [`HedgeLayerBuilder`]) makes [`Hedge`] services,
//! whose [`HedgeFuture`] sends a second copy of a request still unanswered after a delay and
//! answers with the first classified success. [`HedgeGate`] is what else must agree before a
//! hedge goes out (the retry layer's pacer and the circuit breakers are gates);
//! [`HedgeStats`] counts what happened; [`HedgeReport`](crate::report::HedgeReport) says which
//! copy answered a request.
//!
//! Retries mend failures; a hedge cuts the tail of an endpoint that answers well but now and
//! then slowly (a stalled connection, a garbage-collection pause, one slow replica behind a
//! balancer). It is for interactive callers, whose p99 is the product; a webhook sender, whose
//! deliveries may take seconds, has no use for it. See [`HedgeLayer`] for how a hedge is paid
//! for and when none is sent, and `docs/hedging.md` for the measured effect.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_http_retry::hedge::HedgeLayer;
//!
//! let hedge = HedgeLayer::builder().delay(Duration::from_millis(10)).build().unwrap();
//! let slow = service_fn(|_: http::Request<String>| async {
//!     tokio::time::sleep(Duration::from_millis(50)).await;
//!     Ok::<_, std::io::Error>(http::Response::new(String::new()))
//! });
//! let client = ServiceBuilder::new().layer(hedge.clone()).service(slow);
//! // A POST without an idempotency key may not be sent twice: it is never hedged.
//! let post = http::Request::post("http://api.internal/orders").body(String::new()).unwrap();
//! client.clone().oneshot(post).await.unwrap();
//! assert_eq!(hedge.stats().hedges, 0);
//! let get = http::Request::get("http://api.internal/orders/7").body(String::new()).unwrap();
//! client.oneshot(get).await.unwrap();
//! assert_eq!(hedge.stats().hedges, 1);
//! # }
//! ```

mod config;
mod endpoints;
mod future;
mod gate;
mod layer;
mod service;
mod sketch;
mod stats;

pub use future::HedgeFuture;
pub use gate::HedgeGate;
pub use layer::{HedgeLayer, HedgeLayerBuilder};
pub use service::Hedge;
pub use stats::HedgeStats;

/// The pacer keeps a hedging layer's sketches in its endpoints (one view of each).
pub(crate) use sketch::SharedSketch;
