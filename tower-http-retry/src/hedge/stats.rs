//! The hedging counters, shared by every clone of a layer, and their snapshot [`HedgeStats`].

use crate::sync::atomic::{AtomicU64, Ordering};

/// Counters of a [`HedgeLayer`](super::HedgeLayer) and every service it made, as
/// [`HedgeLayer::stats`](super::HedgeLayer::stats) reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HedgeStats {
    /// Requests the layer served.
    pub requests: u64,
    /// Requests that could have been hedged: repeatable, and given a delay.
    pub armed: u64,
    /// Hedges sent.
    pub hedges: u64,
    /// Requests won by a hedge: their success or permanent answer came from a hedge rather
    /// than the first copy. A transient failure returned because every copy failed is no win,
    /// whichever copy it came from.
    pub won_by_hedge: u64,
    /// Hedges not sent because the layer's own cap (`max_extra_load`) was used up.
    pub refused_by_cap: u64,
    /// Hedges not sent because the shared retry budget refused them.
    pub refused_by_budget: u64,
    /// Hedges not sent because a [gate](super::HedgeGate) (the pacer, a breaker) refused them.
    pub refused_by_gate: u64,
    /// Windows in which hedging paused because nearly every request outlived its delay.
    pub pauses: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    armed: AtomicU64,
    hedges: AtomicU64,
    won_by_hedge: AtomicU64,
    refused_by_cap: AtomicU64,
    refused_by_budget: AtomicU64,
    refused_by_gate: AtomicU64,
    pauses: AtomicU64,
}

/// What a counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Request,
    Armed,
    Hedge,
    WonByHedge,
    RefusedByCap,
    RefusedByBudget,
    RefusedByGate,
    Pause,
}

impl Event {
    /// The `event` label of the hedging counter (feature `metrics`).
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Event::Request => "request",
            Event::Armed => "armed",
            Event::Hedge => "sent",
            Event::WonByHedge => "won",
            Event::RefusedByCap => "refused_cap",
            Event::RefusedByBudget => "refused_budget",
            Event::RefusedByGate => "refused_gate",
            Event::Pause => "paused",
        }
    }
}

impl Counters {
    pub(crate) fn count(&self, event: Event) {
        let counter = match event {
            Event::Request => &self.requests,
            Event::Armed => &self.armed,
            Event::Hedge => &self.hedges,
            Event::WonByHedge => &self.won_by_hedge,
            Event::RefusedByCap => &self.refused_by_cap,
            Event::RefusedByBudget => &self.refused_by_budget,
            Event::RefusedByGate => &self.refused_by_gate,
            Event::Pause => &self.pauses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if event != Event::Request {
            crate::telemetry::hedge(event.as_str());
        }
    }

    pub(crate) fn snapshot(&self) -> HedgeStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        HedgeStats {
            requests: load(&self.requests),
            armed: load(&self.armed),
            hedges: load(&self.hedges),
            won_by_hedge: load(&self.won_by_hedge),
            refused_by_cap: load(&self.refused_by_cap),
            refused_by_budget: load(&self.refused_by_budget),
            refused_by_gate: load(&self.refused_by_gate),
            pauses: load(&self.pauses),
        }
    }
}
