//! [`PacingMode`]: what an endpoint is doing, as the rules, the stores and the stats say it,
//! and the telemetry of entering one.

/// What the endpoint is doing, as [`PacingStats`](crate::pacing::PacingStats) reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PacingMode {
    /// Healthy: requests go through on their own timers.
    Open,
    /// Down: waiting requests are let through one probe at a time, at the probe rate.
    Probing,
    /// Recovering: waiting requests are released at a rate that grows while losses stay low.
    Ramping,
    /// Told to wait by the endpoint (`Retry-After`): nothing is released until the pause ends.
    Paused,
}

impl PacingMode {
    /// The mode's name in lower case (`open`, `probing`, `ramping`, `paused`): the label its
    /// metrics carry.
    pub const fn as_str(self) -> &'static str {
        match self {
            PacingMode::Open => "open",
            PacingMode::Probing => "probing",
            PacingMode::Ramping => "ramping",
            PacingMode::Paused => "paused",
        }
    }
}

/// A mode entered, in the telemetry (the metrics under `labels`, the layer's).
pub(crate) fn trace(labels: &crate::telemetry::Labels, mode: PacingMode) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "tower_http_retry::pacer", ?mode, "endpoint pacing");
    crate::telemetry::pacer_mode(labels, mode.as_str());
}
