//! Deliveries that outlive the process, for [tower-http-retry](tower_http_retry): a durable
//! outbox on an existing job queue ([apalis](https://docs.rs/apalis) 1.0: SQLite embedded by
//! default, Redis or Postgres for a fleet (features `redis`, `postgres`); the adapter takes any
//! durable apalis backend), webhook schedules over hours and days, a dead-letter queue and
//! endpoint disabling, drained through the **same** retry layer, pacer and fleet store as every
//! other request.
//!
//! * A sender makes a [`Delivery`] of a request ([`RecordRules::record`]) and
//!   [enqueues](Redelivery::enqueue) it: stored before anything is sent.
//! * Workers (apalis workers, in as many processes as you like) take due deliveries and
//!   [handle](Redelivery::handle) them: one slot's sequence through the retry layer, then
//!   stored again at the next slot of the [`Schedule`] (never a sleep in the worker), stored
//!   again at the pacer's time when the layer handed it back unsent, dead-lettered
//!   ([`DeadLetter`], [`DeadReason`]), or done.
//! * A worker killed mid-attempt leaves its task to the engine, which hands it out again once
//!   its heartbeat is missed: at least once, never lost; the receiver deduplicates by the
//!   delivery id the request carries (`webhook-id` by default).
//!
//! The stable surface (the record, the schedule, the [`Outbox`] trait and the step rules) does
//! not name apalis; [`ApalisOutbox`] is the adapter, pinned to apalis 1.0.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use bytes::Bytes;
//! use tower::Layer;
//! use tower_http_retry_redelivery::{sqlite, supervise, RecordRules, Redelivery, Schedule};
//!
//! let outbox = sqlite::open("deliveries.db", sqlite::SqliteOptions::default()).await?;
//! let schedule = Schedule::standard_webhooks();
//! let transport = tower::service_fn(|_: http::Request<Bytes>| async {
//!     Ok::<_, tower::BoxError>(http::Response::new(()))
//! });
//! let client = schedule.retry_layer().build()?.layer(transport);
//! let redelivery: Redelivery<_, _> = Redelivery::new(client, outbox.clone(), schedule);
//!
//! let request = http::Request::post("https://hooks.example/in").body(Bytes::from("{}"))?;
//! redelivery.enqueue(RecordRules::new().record("msg_1", request)?).await?;
//!
//! // At most 10 deliveries in hand (`IN_HAND`): what a kill re-sends, and what the pacer holds.
//! // Under a fixed name, a new run whenever the engine ends one (`supervise`).
//! let run = |run, stopping| {
//!     let redelivery = redelivery.clone();
//!     let worker = outbox.worker(run).build(move |delivery| {
//!         let redelivery = redelivery.clone();
//!         async move { redelivery.handle(delivery).await }
//!     });
//!     worker.run_until(stopping)
//! };
//! let stop = std::future::pending(); // or a shutdown signal
//! supervise(&outbox, "worker-1", run, |ended| eprintln!("{ended}"), stop).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The guide, with what a crash costs and the engines compared: `docs/redelivery.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod engine;
pub mod health;
mod outbox;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod record;
mod redelivery;
#[cfg(feature = "redis")]
pub mod redis;
pub mod schedule;
pub mod signature;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod stats;
pub mod step;
mod supervise;

pub use engine::{
    dead_letters, replay, start_run, ApalisOutbox, DeadLetterQueue, EngineError, Polled, Reclaim,
    IN_HAND,
};
pub use outbox::Outbox;
pub use record::{Delivery, RecordRules};
pub use redelivery::{HandleFuture, Handled, Redelivery, StoreFailed};
pub use schedule::Schedule;
pub use stats::RedeliveryStats;
pub use step::{DeadLetter, DeadReason};
pub use supervise::{supervise, RunEnded, Stopping};

// The guide's code blocks are compiled and run as doctests, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/redelivery.md")]
struct GuideDoctests;
