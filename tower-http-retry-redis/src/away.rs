//! What the store does when its calls find Redis gone or back: the fallback's episode counted,
//! measured and logged once each way.

use crate::{bump, Inner};
use tokio::time::Instant;
use tower_http_retry::pacing::store::StoreError;

impl<C> Inner<C> {
    /// Redis failed: the fallback from now on, logged and counted once per episode.
    pub(crate) fn lost(&self, error: &StoreError, now: Instant) {
        if self.health.lost(error, now) {
            bump(&self.counters.fallbacks);
            self.metrics.fallback();
            #[cfg(feature = "tracing")]
            tracing::warn!(
                target: "tower_http_retry::pacer",
                prefix = %self.prefix,
                %error,
                "pacing store lost: each endpoint paced locally at this process's share"
            );
        }
    }

    /// Redis answered: rejoined, if it was away.
    pub(crate) fn joined(&self) {
        if self.health.joined() {
            bump(&self.counters.rejoins);
            self.metrics.rejoin();
            #[cfg(feature = "tracing")]
            tracing::info!(
                target: "tower_http_retry::pacer",
                prefix = %self.prefix,
                "pacing store back: the fleet's shared state is used again"
            );
        }
    }
}
