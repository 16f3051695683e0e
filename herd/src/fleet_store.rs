//! The shared pacing store of a simulated fleet: [`InProcessStore`] behind a round trip on the
//! paused clock, as a process of a real fleet reaches Redis.
//!
//! Each call waits half the round trip, is applied (at the caller's `now`, as the Redis store
//! applies at the process's own clock mapped onto Redis's), and waits the other half. The
//! in-process store applies every call atomically on arrival: the round trip is simulated, a
//! compare-and-set conflict is not (its cost is measured against a real Redis in
//! `tower-http-retry-redis/tests/fleet/`). What a handle knows without a call ([`PacingStore::cached`]) is what its
//! last call or read brought, read again in the background once it is older than
//! [`VIEW_TTL`], as the Redis store of `tower-http-retry-redis` does.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tower_http_retry::pacing::store::{
    Applied, Event, InProcessStore, PacingStore, StoreCall, StoreStats, View,
};
use tower_http_retry::pacing::PacingRules;

/// How old a handle's view of an endpoint may be before it is read again in the background
/// (`RedisStoreBuilder::view_ttl`'s default).
pub const VIEW_TTL: Duration = Duration::from_secs(1);

/// One simulated process's handle on the fleet's store, `rtt` away.
#[derive(Clone, Debug)]
pub struct DelayedStore<S = InProcessStore> {
    inner: S,
    rtt: Duration,
    log: Arc<Log>,
}

/// What a handle did: its calls (when each was made), its background reads, and the views it
/// heard.
#[derive(Debug, Default)]
struct Log {
    calls: Mutex<Vec<Instant>>,
    reads: AtomicU64,
    views: Mutex<HashMap<String, Heard>>,
}

#[derive(Clone, Copy, Debug)]
struct Heard {
    view: Option<View>,
    read_at: Instant,
    reading: bool,
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

impl<S: PacingStore + Clone> DelayedStore<S> {
    /// `inner` with every call delayed by `rtt`.
    pub fn new(inner: S, rtt: Duration) -> Self {
        Self {
            inner,
            rtt,
            log: Arc::default(),
        }
    }

    /// Calls made through this handle (the harness's "store calls per request").
    pub fn calls(&self) -> u64 {
        lock(&self.log.calls).len() as u64
    }

    /// When each call through this handle was made.
    pub fn call_times(&self) -> Vec<Instant> {
        lock(&self.log.calls).clone()
    }

    /// Background reads of views older than [`VIEW_TTL`] (not on any request's path).
    pub fn reads(&self) -> u64 {
        self.log.reads.load(Ordering::Relaxed)
    }

    /// Reads `endpoint` in the background, a round trip away.
    fn read(&self, rules: &PacingRules, endpoint: &str) {
        self.log.reads.fetch_add(1, Ordering::Relaxed);
        let (inner, log, rtt) = (self.inner.clone(), Arc::clone(&self.log), self.rtt);
        let (rules, endpoint) = (rules.clone(), endpoint.to_owned());
        tokio::spawn(async move {
            let applied = round_trip(rtt, async {
                inner
                    .apply(&rules, &endpoint, &[Event::Refresh], Instant::now())
                    .await
            })
            .await;
            heard(&log, &endpoint, applied.view);
        });
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `view` of `endpoint` was heard just now.
fn heard(log: &Log, endpoint: &str, view: View) {
    lock(&log.views).insert(
        endpoint.to_owned(),
        Heard {
            view: Some(view),
            read_at: Instant::now(),
            reading: false,
        },
    );
}

impl<S: PacingStore + Clone> PacingStore for DelayedStore<S> {
    fn apply<'a>(
        &'a self,
        rules: &'a PacingRules,
        endpoint: &'a str,
        events: &'a [Event],
        now: Instant,
    ) -> StoreCall<'a> {
        lock(&self.log.calls).push(now);
        StoreCall::pending(async move {
            let applied = round_trip(self.rtt, async {
                self.inner.apply(rules, endpoint, events, now).await
            })
            .await;
            heard(&self.log, endpoint, applied.view);
            applied
        })
    }

    fn cached(&self, rules: &PacingRules, endpoint: &str, now: Instant) -> Option<View> {
        let mut views = lock(&self.log.views);
        let heard = views.entry(endpoint.to_owned()).or_insert(Heard {
            view: None,
            read_at: now,
            reading: false,
        });
        let view = heard.view;
        // Never heard of, or heard of longer ago than the TTL: read again in the background,
        // one read at a time.
        let stale = view.is_none() || now.saturating_duration_since(heard.read_at) >= VIEW_TTL;
        if stale && !heard.reading {
            heard.reading = true;
            drop(views);
            self.read(rules, endpoint);
        }
        view
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
    use tower_http_retry::Pacing;

    #[tokio::test(start_paused = true)]
    async fn a_call_takes_the_round_trip_and_the_fleet_shares_the_mode() {
        let pacing = Pacing::new();
        let fleet = DelayedStore::fleet(2, Duration::from_millis(2));
        let start = Instant::now();
        let down = [Event::Down { jitter: 0.5 }];
        fleet[0].apply(pacing.rules(), "hook", &down, start).await;
        assert_eq!(start.elapsed(), Duration::from_millis(2));
        let seen = fleet[1]
            .apply(pacing.rules(), "hook", &[Event::Refresh], Instant::now())
            .await;
        assert_eq!(seen.view.mode, PacingMode::Probing);
        assert_eq!((fleet[0].calls(), fleet[1].calls()), (1, 1));
        assert_eq!(fleet[1].stats().calls, 2, "one store under both handles");
    }

    #[tokio::test(start_paused = true)]
    async fn a_view_is_what_the_last_call_or_read_brought() {
        let pacing = Pacing::new();
        let fleet = DelayedStore::fleet(2, Duration::from_millis(2));
        let now = Instant::now();
        assert_eq!(
            fleet[1].cached(pacing.rules(), "hook", now),
            None,
            "never heard of"
        );
        // The read reaches the store half a round trip from now; the down report after it.
        tokio::time::sleep(Duration::from_micros(500)).await;
        let down = [Event::Down { jitter: 0.5 }];
        fleet[0]
            .apply(pacing.rules(), "hook", &down, Instant::now())
            .await;
        let mode = |i: usize| {
            fleet[i]
                .cached(pacing.rules(), "hook", Instant::now())
                .map(|v| v.mode)
        };
        assert_eq!(mode(0), Some(PacingMode::Probing), "its own call");
        assert_eq!(
            mode(1),
            Some(PacingMode::Open),
            "the read it made before the call"
        );
        tokio::time::sleep(VIEW_TTL).await;
        assert_eq!(mode(1), Some(PacingMode::Open), "stale: read again");
        tokio::time::sleep(Duration::from_millis(2)).await;
        tokio::task::yield_now().await;
        assert_eq!(mode(1), Some(PacingMode::Probing));
        assert_eq!(fleet[1].reads(), 2);
    }
}
