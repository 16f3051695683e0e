//! Reliability under bad input and shutdown: streaming bodies, shutdown and dropped futures,
//! configuration validation, and the budget under concurrency.
//!
//! The fuzzing of `Retry-After` lives in `tests/fuzz_retry_after.rs`, the chaos run against a
//! real server in `tests/chaos/`.

#[path = "../support.rs"]
mod support;

mod budget;
mod config;
mod replay;
mod shutdown;
