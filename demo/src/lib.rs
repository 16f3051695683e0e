//! The demos of tower-http-retry, each shared by the example that shows it and the test that
//! checks it, both in the root package. A workspace member of its own (`publish = false`), so
//! that both use it as a crate instead of including each other's files.
//!
//! * [`webhook`]: the webhook scenario of `examples/webhook_delivery.rs` (the crate's main demo,
//!   `cargo run --example webhook_delivery`) and `tests/webhook/` (its books add up).
//! * [`proxy`]: the axum reverse proxy of `examples/axum_proxy.rs` and `tests/proxy/`.
//! * [`durable`]: the durable path's worker process (`src/bin/redelivery_worker.rs`), which
//!   `examples/durable_webhooks.rs` and `tests/durable/` start and kill.

pub mod durable;
pub mod proxy;
pub mod webhook;
