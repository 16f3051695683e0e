//! The shared pacing store of a simulated fleet: [`InProcessStore`] behind a round trip on the
//! paused clock, as a process of a real fleet reaches Redis. Ready for the fleet rows with a
//! shared store (issue 21, phase 2), next to today's rows of independent processes.
//!
//! Each call waits half the round trip, is applied (at the caller's `now`, as the Redis store
//! applies at the process's own clock mapped onto Redis's), and waits the other half. The
//! in-process store applies every call atomically on arrival: the round trip is simulated, a
//! compare-and-set conflict is not (its cost is measured against a real Redis in
//! `tests/fleet/`).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower_http_retry::pacing::store::{
    Applied, Event, InProcessStore, PacingStore, StoreCall, StoreStats, View,
};
use tower_http_retry::Pacing;

/// One simulated process's handle on the fleet's store, `rtt` away.
#[derive(Clone, Debug)]
pub struct DelayedStore<S = InProcessStore> {
    inner: S,
    rtt: Duration,
    calls: Arc<AtomicU64>,
}

impl DelayedStore {
    /// `processes` handles on one in-process store (each a peer of its own), every call
    /// taking `rtt`.
    pub fn fleet(processes: usize, rtt: Duration) -> Vec<DelayedStore> {
        let store = InProcessStore::new();
        (0..processes)
            .map(|_| DelayedStore::new(store.peer(), rtt))
            .collect()
    }
}

impl<S: PacingStore> DelayedStore<S> {
    /// `inner` with every call delayed by `rtt`.
    pub fn new(inner: S, rtt: Duration) -> Self {
        Self {
            inner,
            rtt,
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Calls made through this handle (the harness's "store calls per request").
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl<S: PacingStore> PacingStore for DelayedStore<S> {
    fn apply<'a>(
        &'a self,
        pacing: &'a Pacing,
        endpoint: &'a str,
        events: &'a [Event],
        now: Instant,
    ) -> StoreCall<'a> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        StoreCall::pending(round_trip(self.rtt, async move {
            self.inner.apply(pacing, endpoint, events, now).await
        }))
    }

    fn cached(&self, pacing: &Pacing, endpoint: &str, now: Instant) -> Option<View> {
        self.inner.cached(pacing, endpoint, now)
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }
}

/// `call` half a round trip after now, its answer half a round trip later.
async fn round_trip(rtt: Duration, call: impl Future<Output = Applied>) -> Applied {
    tokio::time::sleep(rtt / 2).await;
    let applied = call.await;
    tokio::time::sleep(rtt - rtt / 2).await;
    applied
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_http_retry::pacing::PacingMode;

    #[tokio::test(start_paused = true)]
    async fn a_call_takes_the_round_trip_and_the_fleet_shares_the_mode() {
        let pacing = Pacing::new();
        let fleet = DelayedStore::fleet(2, Duration::from_millis(2));
        let start = Instant::now();
        let down = [Event::Down { jitter: 0.5 }];
        fleet[0].apply(&pacing, "hook", &down, start).await;
        assert_eq!(start.elapsed(), Duration::from_millis(2));
        let seen = fleet[1]
            .apply(&pacing, "hook", &[Event::Refresh], Instant::now())
            .await;
        assert_eq!(seen.view.mode, PacingMode::Probing);
        assert_eq!((fleet[0].calls(), fleet[1].calls()), (1, 1));
        assert_eq!(fleet[1].stats().calls, 2, "one store under both handles");
    }
}
