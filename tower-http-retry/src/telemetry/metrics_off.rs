//! Without the `metrics` feature: every recording point is an empty inline function.

use crate::report::{DelaySource, StopReason};
use std::time::Duration;

#[inline(always)]
pub(crate) fn attempt(_number: u32, _after: Option<DelaySource>) {}

#[inline(always)]
pub(crate) fn stop(_reason: StopReason) {}

#[inline(always)]
pub(crate) fn delay(_delay: Duration, _source: DelaySource) {}

#[inline(always)]
pub(crate) fn budget_granted() {}

#[inline(always)]
pub(crate) fn budget_denied() {}

#[inline(always)]
pub(crate) fn budget_refunded() {}

#[inline(always)]
pub(crate) fn pacer_mode(_mode: &'static str) {}

#[inline(always)]
pub(crate) fn queue_joined() {}

#[inline(always)]
pub(crate) fn queue_left(_waiters: usize) {}

#[inline(always)]
pub(crate) fn paced_endpoint(_from: &'static str, _to: &'static str) {}

#[inline(always)]
pub(crate) fn circuit(_from: Option<&'static str>, _to: &'static str) {}

#[inline(always)]
pub(crate) fn circuit_dropped(_state: &'static str) {}

#[inline(always)]
pub(crate) fn circuit_rejected() {}
