//! Tests of the circuit breaker on paused tokio time: every state transition, readiness on
//! `tower_test::mock`, what counts as a failure, and how it wakes the retry layer's sleepers.

mod classification;
mod half_open;
mod interactive;
mod keyed;
mod readiness;
mod scripted;
mod transitions;
mod wake;
