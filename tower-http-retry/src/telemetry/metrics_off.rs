//! Without the `metrics` feature: every recording point is an empty inline function.

use crate::report::{DelaySource, StopReason};
use std::time::Duration;

/// The keys a layer's metrics are recorded under: without the `metrics` feature, none.
#[derive(Clone, Debug, Default)]
pub(crate) struct Labels;

impl Labels {
    #[inline(always)]
    pub(crate) fn new(_layer: Option<&str>, _authorities: &[Box<str>]) -> Self {
        Labels
    }

    #[inline(always)]
    pub(crate) fn for_endpoint(&self, _authority: &str) -> Self {
        Labels
    }
}

#[inline(always)]
pub(crate) fn attempt(_labels: &Labels, _number: u32, _after: Option<DelaySource>) {}

#[inline(always)]
pub(crate) fn stop(_labels: &Labels, _reason: StopReason) {}

#[inline(always)]
pub(crate) fn delay(_labels: &Labels, _delay: Duration, _source: DelaySource) {}

#[inline(always)]
pub(crate) fn budget_granted(_labels: &Labels) {}

#[inline(always)]
pub(crate) fn budget_denied(_labels: &Labels) {}

#[inline(always)]
pub(crate) fn budget_refunded(_labels: &Labels) {}

#[inline(always)]
pub(crate) fn pacer_mode(_labels: &Labels, _mode: &'static str) {}

#[inline(always)]
pub(crate) fn queue_joined(_labels: &Labels) {}

#[inline(always)]
pub(crate) fn queue_left(_labels: &Labels, _waiters: usize) {}

#[inline(always)]
pub(crate) fn paced_endpoint(_labels: &Labels, _from: &'static str, _to: &'static str) {}

#[inline(always)]
pub(crate) fn circuit(_labels: &Labels, _from: Option<&'static str>, _to: &'static str) {}

#[inline(always)]
pub(crate) fn circuit_dropped(_labels: &Labels, _state: &'static str) {}

#[inline(always)]
pub(crate) fn circuit_rejected(_labels: &Labels) {}

#[inline(always)]
pub(crate) fn hedge(_event: &'static str) {}

#[inline(always)]
pub(crate) fn concurrency(
    _labels: &Labels,
    _limit: u32,
    _in_flight: u32,
    _no_load: Option<Duration>,
) {
}
