//! The processes of a fleet that asked lately, as the shared state remembers them.

use super::super::clock::Nanos;

/// The most peers remembered; past it the one seen longest ago is replaced.
pub(crate) const MAX_PEERS: usize = 256;

/// A process that asked lately (the fleet's size, for fair shares and the fallback).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Peer {
    pub(crate) holder: u64,
    pub(crate) seen: Nanos,
    /// While ramping: the last slot granted it, on the fleet's slot clock, and its time.
    pub(crate) last: f64,
    pub(crate) last_at: Nanos,
    /// Its place in the order of the peers with a stream, as a fraction of a cycle in 32 bits,
    /// once `placed` (the middle of the widest gap between the others'): its rank in that order
    /// is where its slots fall in each cycle of the fleet's slots.
    pub(crate) phase: u32,
    pub(crate) placed: bool,
    /// It said it has nothing waiting (its last ask wanted nothing).
    pub(crate) idle: bool,
    /// Its successes per second over the span of its last report, and when it reported.
    pub(crate) accepted: f32,
    pub(crate) reported: Nanos,
}

impl Peer {
    pub(crate) fn new(holder: u64, seen: Nanos) -> Self {
        Self {
            holder,
            seen,
            last: 0.0,
            last_at: 0,
            phase: 0,
            placed: false,
            idle: false,
            accepted: 0.0,
            reported: 0,
        }
    }
}
