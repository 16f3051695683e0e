//! Reliability under bad input and shutdown: streaming bodies, shutdown and dropped futures, and
//! the budget under concurrency.
//!
//! The fuzzing of `Retry-After` lives in `tests/fuzz_retry_after.rs`, the chaos run against a
//! real server in `tests/chaos/`, the validation of every builder in `tests/config/`.

use test_support as support;

mod budget;
mod replay;
mod shutdown;
