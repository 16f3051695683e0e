//! [`InProcessStore`]: the shared states of endpoints under one lock, for the layers (or
//! simulated processes) of one process. Every call is answered at once, with no allocation
//! beyond its replies and no await point.

use super::backend::{PacingStore, StoreCall};
use super::protocol::{Applied, Event, StoreStats, View};
use super::run::{applied, cached_view, holder_id, run, Timing};
use crate::error::InvalidConfig;
use crate::pacing::clock::{nanos, Clock, Nanos, LOCAL_EPOCH};
use crate::pacing::shared::SharedState;
use crate::pacing::PacingRules;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// A [`PacingStore`] in this process's memory: one state per endpoint under a lock.
///
/// Its handles share what they store: a clone is the same process, a [`peer`](Self::peer)
/// another process of the same fleet (its own identity, as a Redis store per process has). A
/// record expires as a Redis key does (see [`record_ttl`](InProcessStoreBuilder::record_ttl)):
/// a call that makes a record first drops the expired ones, at most once a record time to live.
/// Time is tokio's, so tests and simulations on a paused clock see what a fleet on a real store
/// would, without a network.
#[derive(Clone)]
pub struct InProcessStore {
    shared: Arc<Shared>,
    holder: u64,
}

struct Shared {
    timing: Timing,
    records: Mutex<Records>,
    clock: OnceLock<Clock>,
    calls: AtomicU64,
}

/// The records, and when the expired ones are swept next.
#[derive(Default)]
struct Records {
    map: HashMap<String, Record>,
    /// Store time at or after which a call that makes a record first drops the expired ones:
    /// a sweep at most once a record time to live, so that the records kept are those of the
    /// endpoints used within about two of them, at an amortized cost per new endpoint.
    sweep_at: Nanos,
}

impl Records {
    /// Drops the records expired at `at`, and the room they took.
    fn sweep(&mut self, at: Nanos) {
        self.map.retain(|_, record| record.expires > at);
        if self.map.capacity() > 4 * self.map.len().max(16) {
            self.map.shrink_to(2 * self.map.len());
        }
    }
}

struct Record {
    state: SharedState,
    expires: Nanos,
}

impl InProcessStore {
    /// A store with the default timing: probe leases taken back after 10 s, records kept 60 s
    /// past the last time they hold.
    pub fn new() -> Self {
        Self::with_timing(Timing::DEFAULT)
    }

    /// A builder starting from the defaults.
    pub fn builder() -> InProcessStoreBuilder {
        InProcessStoreBuilder {
            timing: Timing::DEFAULT,
        }
    }

    fn with_timing(timing: Timing) -> Self {
        Self {
            shared: Arc::new(Shared {
                timing,
                records: Mutex::new(Records::default()),
                clock: OnceLock::new(),
                calls: AtomicU64::new(0),
            }),
            holder: holder_id(),
        }
    }

    /// A handle on the same states for another process of the fleet: its leases and its place
    /// among the peers are its own.
    pub fn peer(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            holder: holder_id(),
        }
    }

    /// Endpoints with a record now (expired ones are gone).
    pub fn records(&self, now: Instant) -> usize {
        let at = self.clock(now).to_shared(now);
        let mut records = self.lock();
        records.sweep(at);
        records.map.len()
    }

    fn clock(&self, now: Instant) -> Clock {
        *self
            .shared
            .clock
            .get_or_init(|| Clock::new(now, LOCAL_EPOCH))
    }

    fn lock(&self) -> MutexGuard<'_, Records> {
        // Plain data with no invariant to break half-way: a poisoned lock is usable.
        self.shared
            .records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// [`PacingStore::apply`], answered at once.
    fn apply_now(
        &self,
        rules: &PacingRules,
        endpoint: &str,
        events: &[Event],
        now: Instant,
    ) -> Applied {
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        let timing = self.shared.timing;
        let rules = timing.rules(rules);
        let clock = self.clock(now);
        let at = clock.to_shared(now);
        let mut records = self.lock();
        if at >= records.sweep_at && !records.map.contains_key(endpoint) {
            records.sweep(at);
            records.sweep_at = at.saturating_add(nanos(timing.record_ttl));
        }
        let record = records
            .map
            .entry(endpoint.to_owned())
            .or_insert_with(|| Record {
                state: SharedState::new(),
                expires: 0,
            });
        if record.expires <= at {
            record.state = SharedState::new();
        }
        let replies = run(
            &mut record.state,
            &rules,
            self.holder,
            events,
            &clock,
            now,
            false,
        );
        record.expires = at.saturating_add(timing.expiry_ms(&record.state, at) * 1_000_000);
        applied(replies, &record.state, &rules, clock, at)
    }
}

impl Default for InProcessStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for InProcessStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcessStore")
            .field("holder", &self.holder)
            .field("timing", &self.shared.timing)
            .finish_non_exhaustive()
    }
}

impl PacingStore for InProcessStore {
    fn apply<'a>(
        &'a self,
        rules: &'a PacingRules,
        endpoint: &'a str,
        events: &'a [Event],
        now: Instant,
    ) -> StoreCall<'a> {
        StoreCall::ready(self.apply_now(rules, endpoint, events, now))
    }

    fn cached(&self, rules: &PacingRules, endpoint: &str, now: Instant) -> Option<View> {
        let clock = self.clock(now);
        let records = self.lock();
        let record = records.map.get(endpoint)?;
        if record.expires <= clock.to_shared(now) {
            return None;
        }
        let rules = self.shared.timing.rules(rules);
        Some(cached_view(&record.state, &rules, &clock, now, now))
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            calls: self.shared.calls.load(Ordering::Relaxed),
            ..StoreStats::default()
        }
    }
}

/// Configures an [`InProcessStore`]; [`build`](Self::build) checks every value.
#[derive(Clone, Debug)]
#[must_use]
pub struct InProcessStoreBuilder {
    timing: Timing,
}

impl InProcessStoreBuilder {
    /// How long a probe lease lasts if its holder never ends it (10 s): then the fleet's probe
    /// stream goes on without it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.timing.lease_ttl = ttl;
        self
    }

    /// How long a record is kept past the last time it holds (a pause's end, a lease's expiry)
    /// and its last change (60 s); then it expires, and the endpoint is open.
    pub fn record_ttl(mut self, ttl: Duration) -> Self {
        self.timing.record_ttl = ttl;
        self
    }

    /// Checks every value: fails, naming the field, on a zero or over-long duration.
    pub fn build(self) -> Result<InProcessStore, InvalidConfig> {
        Ok(InProcessStore::with_timing(self.timing.check()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::store::{Release, Reply};
    use crate::pacing::{Pacing, PacingMode};

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn peers_share_the_mode_and_a_record_expires_after_its_ttl() {
        let pacing = Pacing::new();
        let store = InProcessStore::builder()
            .record_ttl(1000 * MS)
            .build()
            .unwrap();
        let other = store.peer();
        let now = Instant::now();
        let applied = store.apply_now(pacing.rules(), "a", &[Event::Down { jitter: 0.0 }], now);
        assert_eq!(applied.view.mode, PacingMode::Probing);
        let seen = other.cached(pacing.rules(), "a", now).expect("a record");
        assert_eq!(seen.mode, PacingMode::Probing);
        assert_eq!(other.cached(pacing.rules(), "b", now), None);
        // The first probe is due 250 ms after the report; the record holds until then + 1 s.
        let later = now + 1249 * MS;
        assert_eq!(store.records(later), 1);
        assert_eq!(store.records(later + 2 * MS), 0);
        let ask = [Event::Release {
            want: 1,
            jitter: 0.0,
        }];
        let applied = other.apply_now(pacing.rules(), "a", &ask, later + 2 * MS);
        assert_eq!(applied.replies, [Reply::Release(Release::Unpaced)]);
    }

    #[test]
    fn a_call_is_answered_without_a_future() {
        let pacing = Pacing::new();
        let store = InProcessStore::new();
        let call = store.apply(pacing.rules(), "a", &[Event::Refresh], Instant::now());
        let applied = call.into_ready().expect("ready at once");
        assert_eq!(applied.view.mode, PacingMode::Open);
        assert_eq!(store.stats().calls, 1);
    }

    #[test]
    fn the_builder_names_a_zero_ttl() {
        let err = InProcessStore::builder()
            .lease_ttl(Duration::ZERO)
            .build()
            .unwrap_err();
        assert_eq!(err.field(), "store.lease_ttl");
    }
}
