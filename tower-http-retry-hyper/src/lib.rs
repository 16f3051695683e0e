//! hyper-util's legacy client made safe for connection rotation under
//! [tower-http-retry](tower_http_retry): every
//! request a rotating HTTP/2 server turns away unprocessed is sent again, whatever its method,
//! and none it processed is sent twice. Opt-in: [`rotation_safe_client`] (a
//! [`RotationSafeClient`] on a [`SerialExecutor`]) and the [`StreamSlotsLayer`] in front of it.
//! And, for a reverse proxy on hyper, what it answers when no upstream response came back
//! ([`proxy::error_response`]: 502, 504, or 503 with `Retry-After` for an open circuit or a
//! [pool](tower_http_retry::pool) whose every upstream asked to wait).
//!
//! # Why
//!
//! A server rotates an HTTP/2 connection with a `GOAWAY` naming the last stream it processes
//! (nginx after every 1,000 requests, Envoy, HAProxy and Go servers on drain); a stream above it
//! was not processed and may be sent again, even a POST (RFC 9113, section 8.7). hyper's HTTP/2
//! client (up to at least 1.12) blurs that line in two ways, so that neither of its errors proves
//! anything:
//!
//! * it hands the *connection's* `GOAWAY` to the request whose stream its client task had just
//!   opened when the connection task, running in parallel on another thread, received the
//!   `GOAWAY`, although that stream may be at or below the last stream id and processed (the
//!   error is the one h2 gives a stream above it). Against nginx rotating every 3 requests, 3
//!   unkeyed POSTs in 5 runs of 1,000 at 100 concurrent were applied twice when that error was
//!   taken for proof. So [`HttpClassifier`](tower_http_retry::HttpClassifier) takes a `GOAWAY` delivered
//!   through hyper for a [rotation](tower_http_retry::classify::Signals::rotation) without proof: sent
//!   again only when the request may be repeated;
//! * it fails a request it had parked, waiting for a stream slot (h2 said the connection was
//!   about to reach the server's `SETTINGS_MAX_CONCURRENT_STREAMS`), with `User(DispatchGone)`
//!   when the `GOAWAY` arrives, although h2 may have written it meanwhile: transient, ambiguous.
//!
//! And a request handed to a connection just as the connection ends can wait forever: hyper's
//! channel to the connection checks that it is open and takes the request in two steps, and a
//! connection task that ends in between, on another thread, never answers it (seen against
//! nginx in up to 36 of 1,000 requests with hyper-util's client as it is, and once in 5,000 with
//! only hyper's tasks serialized; only a timeout ends it, ambiguous again).
//!
//! The two pieces here remove all three, and a `GOAWAY` is proof again, for any method:
//!
//! * [`rotation_safe_client`] runs the client's tasks, hyper's and each request's own, one at a
//!   time on one thread ([`SerialExecutor`]), so that neither hyper's client task nor a request
//!   can see a connection change halfway through a step. Its connections carry a marker
//!   ([`SerialDispatch`](tower_http_retry::classify::SerialDispatch)) that hyper-util copies into each of their errors
//!   (`hyper_util::client::legacy::Error::connect_info`), where the classifier finds it;
//! * [`StreamSlotsLayer`] keeps fewer requests in flight per authority than the server's
//!   stream limit, so that hyper never parks one.
//!
//! Measured against nginx rotating every 3 requests with 4 streams (`tests/interop`): 60 of 60
//! concurrent GETs and 60 of 60 unkeyed POSTs delivered, each applied once, in 20 of 20 runs,
//! and 1,000 of 1,000 requests at 100 concurrent; with hyper-util's client as is, no POST is ever
//! applied twice either, but most POSTs turned away by a rotation fail (not resent).
//!
//! The price: one thread does the work of every client built on the executor (a core's worth of
//! HTTP/2 framing and pool bookkeeping), each request is a task of its own, and a request waits
//! for a slot once the limit is reached. A client
//! that sends no request the server must not see twice (GETs, or POSTs with an
//! `Idempotency-Key`) does not need either piece: its rotations are resent anyway.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::connect::HttpConnector;
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use tower_http_retry_hyper::{rotation_safe_client, SerialExecutor, StreamSlotsLayer};
//! use tower_http_retry::RetryLayer;
//!
//! let executor = SerialExecutor::start()?;
//! let client = rotation_safe_client::<_, Full<Bytes>>(executor, HttpConnector::new(), |builder| {
//!     builder.http2_only(true).pool_idle_timeout(Duration::from_secs(30));
//! });
//! let service = ServiceBuilder::new()
//!     .layer(RetryLayer::builder().build()?)
//!     .layer(StreamSlotsLayer::new(128)?) // nginx's default http2_max_concurrent_streams
//!     .timeout(Duration::from_secs(5)) // each attempt, once it has a slot
//!     .service(client);
//! # let _ = service;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod client;
mod connector;
mod executor;
pub mod proxy;
mod slots;

pub use client::{rotation_safe_client, ExecutorGone, RotationSafeClient, RotationSafeFuture};
pub use connector::{SerialConnecting, SerialConnection, SerialConnector};
pub use executor::SerialExecutor;
pub use slots::{SlotBody, StreamSlots, StreamSlotsFuture, StreamSlotsLayer};

// The guide's code blocks are compiled and run as doctests, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/rotation.md")]
struct GuideDoctests;
