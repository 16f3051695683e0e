//! [`PacingRules`]: a pacing configuration's checked rules, apart from its store, so that the
//! rules (`shared/`) and the stores (`store/`) read them without the handle that holds a store.

use super::rate::RateConfig;
use http::StatusCode;
use std::time::Duration;

/// The checked rules of a [`Pacing`](super::Pacing) configuration, without its store: what a
/// [`PacingStore`](super::store::PacingStore) is given to apply events by
/// ([`Pacing::rules`](super::Pacing::rules)). Opaque: it is built only by
/// [`PacingBuilder::build`](super::PacingBuilder::build).
#[derive(Clone, Debug)]
pub struct PacingRules {
    pub(crate) probe_interval: Duration,
    pub(crate) probes_in_flight: u32,
    pub(crate) outage_after: u32,
    pub(crate) ramp_interval: Duration,
    pub(crate) loss_threshold: f64,
    pub(crate) idle_to_open: Duration,
    pub(crate) max_waiters: usize,
    /// The longest predicted wait a request joins the queue for (else it is deferred).
    pub(crate) max_queue_wait: Duration,
    pub(crate) max_endpoints: usize,
    pub(crate) first_attempts: bool,
    pub(crate) congestion: Vec<StatusCode>,
    pub(crate) rate: RateConfig,
}

impl PacingRules {
    /// The most endpoints a layer keeps a state for ([`PacingBuilder::max_endpoints`]): a
    /// store's cache of what it heard of endpoints is bounded by it too.
    ///
    /// [`PacingBuilder::max_endpoints`]: super::PacingBuilder::max_endpoints
    pub fn max_endpoints(&self) -> usize {
        self.max_endpoints
    }

    /// How long a process of a fleet waits before it asks again while a probe has been out
    /// for `out` (its success starts the fleet's ramp, which a process hears of only when it
    /// asks): as long again, up to a probe interval, and at least a ramp interval. A probe
    /// most likely ends within a round trip; one out for longer hangs (an endpoint that
    /// swallows requests), and is asked about at the probes' own pace, not ten times a second
    /// by every process.
    pub(crate) fn wait_for_probe(&self, out: Duration) -> Duration {
        out.min(self.probe_interval).max(self.ramp_interval)
    }
}
