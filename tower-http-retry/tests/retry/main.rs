//! Tests of the retry state machine on `tower_test::mock` and paused tokio time.
//!
//! The mock panics when `call` comes without a successful `poll_ready` on the same clone, and
//! its clones start un-ready, so every test here also checks the readiness contract across
//! retries.

mod abort;
mod attempts;
mod budget;
mod classification;
mod deadline;
mod first_attempt;
mod idempotency;
mod jitter;
mod mock_client;
mod readiness;
mod report;
mod retry_after;
