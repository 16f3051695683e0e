//! [`RedisStore`]: the fleet's shared pacing state of [tower-http-retry](tower_http_retry) in
//! Redis, one versioned record per endpoint, changed by a compare-and-set script; the
//! transitions run in the process (the core's one transition function, through its
//! [`remote`](tower_http_retry::pacing::store::remote) kit), Redis only orders the writes and
//! tells the time.
//!
//! The guide (what is shared, the records, what a failing Redis costs, the measured fleets):
//! `docs/fleets.md` in the repository; the pacing store's design:
//! [`tower_http_retry::pacing::store`].
//!
//! # Records
//!
//! One hash per endpoint, `{prefix}:{endpoint}` (see [`RedisStoreBuilder::prefix`]):
//!
//! | field | what |
//! |---|---|
//! | `v` | the version: random when the record is made, then one more per write |
//! | `s` | the shared state, in the core's own versioned byte format (the core's `remote::Record`): about 80 bytes plus 50 per recent process and 24 per probe lease, about 19 KB at most |
//!
//! It expires (`PEXPIRE`) a [record TTL](RedisStoreBuilder::record_ttl) (60 s) past the last
//! time it holds (a pause's end, a lease's expiry) and its last write; an absent record is an
//! open endpoint. A lease is taken back at its expiry
//! ([`lease_ttl`](RedisStoreBuilder::lease_ttl), 10 s) and a peer is forgotten 10 s after its
//! last call, so a process that dies holds nothing. Beside them, one sorted set,
//! `{prefix}#fleet`: the processes that called in the last 10 s, whose count a fallback shares
//! an endpoint nobody paced by. Two scripts, in this crate's `src/`: `read.lua` (the record,
//! `TIME` and the fleet's count) and `swap.lua` (the compare-and-set, described in the file).
//!

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod away;
mod builder;
mod cache;
mod health;
mod script;
mod telemetry;
mod timeout;

pub use builder::RedisStoreBuilder;
#[cfg(feature = "metrics")]
pub use telemetry::describe_metrics;

use cache::{bound, Cached};
use health::Health;
use redis::aio::{ConnectionLike, ConnectionManager};
use script::{Failure, Found, Keys, Scripts, Swap, Trip};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use timeout::CallTimeout;
use tokio::time::Instant;
use tower_http_retry::pacing::store::remote::{Fallback, FleetRules, Record, StoreClock};
use tower_http_retry::pacing::store::{
    Applied, Event, PacingStore, StoreCall, StoreError, StoreStats, View,
};
use tower_http_retry::pacing::PacingRules;

/// Compare-and-set tries per call before it is answered by the fallback (others wrote first
/// every time).
const MAX_TRIES: u32 = 8;
/// Background reads in flight at most, per store.
const MAX_REFRESHES: usize = 16;

/// A [`PacingStore`] in Redis, shared by every process of a fleet that uses the same server and
/// key prefix.
///
/// Each endpoint is one hash, `{prefix}:{endpoint}`, with a version `v` and the shared state
/// `s`; `swap.lua` writes it only if `v` is still the version the state was computed from
/// (and otherwise returns the record as it is, to compute again), and sets it to expire
/// ([`record_ttl`](RedisStoreBuilder::record_ttl) past the last time it holds), so a fleet that
/// stops leaves nothing behind. Both scripts return Redis's `TIME`, onto which each process maps
/// its own clock: the processes' clocks never need to agree.
///
/// Every call has a [timeout](RedisStoreBuilder::call_timeout), by default four times the
/// slowest of its last round trips (5 to 250 ms): a few milliseconds on a quiet network. When
/// Redis fails (a timeout, a refused or reset connection), the store logs it once (with the
/// `tracing` feature), counts it ([`StoreStats::fallbacks`]; with the `metrics` feature also
/// `http_client_retry_pacer_store_fallbacks_total{prefix}`, see `describe_metrics`) and answers
/// from the process's fallback: the endpoint's last known state at this process's share of the fleet (its rate
/// divided by the peers, at most 1.2 times that share of the learned rate; its probes spread
/// as one stream) — never unlimited. The peers are those the record says wait on the endpoint,
/// or, for an endpoint nobody paced (open), the processes that called Redis in the 10 s before
/// this process's last call got through. It tries Redis again after 250 ms, then up to every 5 s,
/// and rejoins the fleet's state when Redis answers ([`StoreStats::rejoins`]).
///
/// An error Redis answers for one endpoint's key (a key of another type, a record of another
/// format) sends that endpoint alone to the fallback: Redis is not away for the others. A
/// probe lease granted by a call whose answer was lost (a timeout after Redis ran the script)
/// is ended by the endpoint's next call that gets through, as a failed probe, instead of
/// blocking the fleet's probe stream until it expires.
///
/// What a process heard of endpoints is kept for at most the pacing's
/// [`max_endpoints`](tower_http_retry::pacing::PacingRules::max_endpoints) of them beside the
/// paced ones (open endpoints read longest ago are forgotten), and endpoints it never heard of
/// are read in the background at most 16 at a time: a sender that meets thousands of healthy
/// hosts keeps nothing of them, as the pacer without a store does.
///
/// The connection is any async Redis connection that can be cloned: a
/// [`ConnectionManager`] (the default type, which reconnects by itself) or a
/// `MultiplexedConnection` the application already has.
///
/// ```no_run
/// use tower_http_retry_redis::RedisStore;
///
/// # async fn connect() -> redis::RedisResult<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let connection = redis::aio::ConnectionManager::new(client).await?;
/// let store = RedisStore::builder(connection)
///     .prefix("webhooks:pacing")
///     .build()
///     .expect("valid store configuration");
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
pub struct RedisStore<C = ConnectionManager> {
    inner: Arc<Inner<C>>,
}

struct Inner<C> {
    connection: C,
    prefix: String,
    /// `{prefix}#fleet`: the processes that called lately (never an endpoint's record, whose
    /// key has a `:` after the prefix).
    fleet_key: String,
    call_timeout: CallTimeout,
    view_ttl: Duration,
    rules: FleetRules,
    scripts: Scripts,
    clock: Mutex<Option<StoreClock>>,
    cache: Mutex<HashMap<String, Cached>>,
    /// Background reads in flight.
    refreshes: AtomicUsize,
    health: Health,
    counters: Counters,
    /// The fleet's size as the last call that got through counted it (1 before any).
    fleet: AtomicU32,
    /// The keys of the store's metrics (feature `metrics`).
    metrics: telemetry::Keys,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    fallbacks: AtomicU64,
    fallback_answers: AtomicU64,
    rejoins: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data with no invariant to break half-way: a poisoned lock is usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A background read of an endpoint in flight: dropped (done, or its task dropped), its entry
/// is no longer marked, and the cache is bounded again (an endpoint read meanwhile was kept).
struct Refreshing<C> {
    inner: Arc<Inner<C>>,
    endpoint: String,
    /// The pacing's `max_endpoints`.
    bound: usize,
}

impl<C> Drop for Refreshing<C> {
    fn drop(&mut self) {
        self.inner.refreshes.fetch_sub(1, Ordering::Relaxed);
        let mut cache = lock(&self.inner.cache);
        if let Some(entry) = cache.get_mut(&self.endpoint) {
            entry.refreshing = false;
        }
        bound(&mut cache, self.bound);
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store on `connection` with the defaults of [`RedisStoreBuilder`].
    pub fn new(connection: C) -> Self {
        Self::builder(connection)
            .build()
            .expect("the default configuration is valid")
    }

    /// A builder starting from the defaults.
    pub fn builder(connection: C) -> RedisStoreBuilder<C> {
        RedisStoreBuilder::new(connection)
    }

    /// The Redis key of `endpoint`'s record.
    pub fn key(&self, endpoint: &str) -> String {
        self.inner.key(endpoint)
    }
}

impl<C> Clone for RedisStore<C> {
    /// The same process: the same identity, cache and counters.
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for RedisStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.prefix)
            .field("holder", &self.inner.rules.holder())
            .field("call_timeout", &self.inner.call_timeout)
            .finish_non_exhaustive()
    }
}

impl<C> PacingStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn apply<'a>(
        &'a self,
        pacing: &'a PacingRules,
        endpoint: &'a str,
        events: &'a [Event],
        now: Instant,
    ) -> StoreCall<'a> {
        StoreCall::pending(self.inner.apply(pacing, endpoint, events, now))
    }

    fn cached(&self, pacing: &PacingRules, endpoint: &str, now: Instant) -> Option<View> {
        let inner = &self.inner;
        let clock = *lock(&inner.clock);
        let mut cache = lock(&inner.cache);
        let known = cache.contains_key(endpoint);
        if !known {
            bound(&mut cache, pacing.max_endpoints().saturating_sub(1));
            cache.insert(endpoint.to_owned(), Cached::unread(now, inner.view_ttl));
        }
        // An endpoint not heard of yet is read in the background, as a stale one is.
        let entry = cache.get_mut(endpoint).expect("just made");
        let seen = clock.map(|clock| match &entry.fallback {
            Some(fallback) => fallback.view(&inner.rules, entry.read_at, now),
            None => inner
                .rules
                .view(pacing, &entry.record, clock, entry.read_at, now),
        });
        let stale = now.saturating_duration_since(entry.read_at) >= inner.view_ttl;
        // While Redis is away, the next try is the calls' to make, not a refresh's per request;
        // and a burst of endpoints never heard of reads at most a few at a time (the others
        // are read when asked of again), not a read each at once that Redis cannot answer
        // within the call timeout.
        if stale
            && !entry.refreshing
            && !inner.health.is_away(now)
            && inner.refreshes.load(Ordering::Relaxed) < MAX_REFRESHES
        {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                entry.refreshing = true;
                inner.refreshes.fetch_add(1, Ordering::Relaxed);
                // Made before the task: a task dropped unpolled (its runtime shut down) clears
                // the flag too, and the endpoint is read again later.
                let refreshing = Refreshing {
                    inner: Arc::clone(inner),
                    endpoint: endpoint.to_owned(),
                    bound: pacing.max_endpoints(),
                };
                let pacing = pacing.clone();
                runtime.spawn(async move {
                    let Refreshing {
                        inner, endpoint, ..
                    } = &refreshing;
                    inner
                        .apply(&pacing, endpoint, &[Event::Refresh], Instant::now())
                        .await;
                    drop(refreshing);
                });
            }
        }
        if known {
            seen
        } else {
            None
        }
    }

    fn stats(&self) -> StoreStats {
        let c = &self.inner.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        // Non-exhaustive: a counter the core adds later reads 0 here.
        let mut stats = StoreStats::default();
        stats.calls = load(&c.calls);
        stats.conflicts = load(&c.conflicts);
        stats.errors = load(&c.errors);
        stats.fallbacks = load(&c.fallbacks);
        stats.fallback_answers = load(&c.fallback_answers);
        stats.rejoins = load(&c.rejoins);
        stats
    }
}

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn key(&self, endpoint: &str) -> String {
        format!("{}:{endpoint}", self.prefix)
    }

    /// Applies `events` through Redis, or through the fallback while Redis is away.
    async fn apply(
        &self,
        pacing: &PacingRules,
        endpoint: &str,
        events: &[Event],
        now: Instant,
    ) -> Applied {
        if let Some(error) = self.health.away(now) {
            return self.apply_locally(pacing, endpoint, events, now, error);
        }
        match self.apply_shared(pacing, endpoint, events, now).await {
            Ok(applied) => {
                self.joined();
                applied
            }
            Err(failure) => {
                // Only a failure of Redis itself is the whole store's: a key of another type
                // sends its own endpoint to the fallback, not every endpoint.
                if failure.store_away {
                    self.lost(&failure.error, now);
                }
                let applied = self.apply_locally(pacing, endpoint, events, now, failure.error);
                // A failure of Redis itself may come after the script ran: a lease it granted
                // is ended by the next call that gets through (see `Cached::orphans`).
                let asked = events.iter().any(|e| matches!(e, Event::Release { .. }));
                if failure.store_away && asked {
                    if let Some(entry) = lock(&self.cache).get_mut(endpoint) {
                        entry.unanswered = true;
                    }
                }
                applied
            }
        }
    }

    /// The compare-and-set loop: apply to the state last heard of; if another process wrote
    /// since, apply again to the state the script returned.
    async fn apply_shared(
        &self,
        pacing: &PacingRules,
        endpoint: &str,
        events: &[Event],
        now: Instant,
    ) -> Result<Applied, Failure> {
        let key = self.key(endpoint);
        let keys = self.keys(&key);
        let read_only = events.iter().all(|event| matches!(event, Event::Refresh));
        let cached = match lock(&self.cache).get(endpoint) {
            Some(entry) if !read_only && entry.fallback.is_none() => {
                Some((entry.version, entry.record.clone()))
            }
            _ => None,
        };
        let (mut found, mut fresh) = match cached {
            Some((version, record)) => (Found { version, record }, false),
            None => {
                let trip = self.read(keys).await?;
                (trip.answer, true)
            }
        };
        if found.version == 0 {
            found.record = self.seed(endpoint, now).unwrap_or(found.record);
        }
        for _ in 0..MAX_TRIES {
            let clock = self.clock_now().await?;
            let mut record = found.record.clone();
            let applied = self.apply_to(pacing, endpoint, &mut record, events, clock, now);
            let changed = record != found.record;
            if !changed && fresh {
                self.remember(endpoint, found.version, record, events, &applied, now);
                return Ok(applied);
            }
            let bytes = changed.then(|| record.encode());
            let ttl_ms = |record: &Record| {
                let ttl = self.rules.expiry(record, clock, now);
                u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
            };
            let write = bytes.as_deref().map(|bytes| (bytes, ttl_ms(&record)));
            let trip = self
                .scripts
                .swap(
                    &self.connection,
                    keys,
                    found.version,
                    write,
                    self.call_timeout.get(),
                )
                .await;
            let trip = self.counted(trip)?;
            match trip.answer {
                Swap::Done { version } => {
                    self.remember(endpoint, version, record, events, &applied, now);
                    return Ok(applied);
                }
                Swap::Conflict(current) => {
                    bump(&self.counters.conflicts);
                    found = *current;
                    if found.version == 0 {
                        found.record = self.seed(endpoint, now).unwrap_or(found.record);
                    }
                    fresh = true;
                }
            }
        }
        Err(StoreError::Contention(MAX_TRIES).into())
    }

    /// Applies `events` to `record` (the state last heard of), after the leases of a call that
    /// went unanswered, which nobody holds (a second layer on this store handle racing this call
    /// within one round trip could see its fresh probe ended early: one probe more for the
    /// fleet). The replies are this call's events' only.
    fn apply_to(
        &self,
        pacing: &PacingRules,
        endpoint: &str,
        record: &mut Record,
        events: &[Event],
        clock: StoreClock,
        now: Instant,
    ) -> Applied {
        let orphans = match lock(&self.cache).get(endpoint) {
            Some(entry) => entry.orphans(&self.rules, record, clock),
            None => Vec::new(),
        };
        if orphans.is_empty() {
            return self.rules.apply(pacing, record, events, clock, now);
        }
        let all: Vec<Event> = orphans.iter().chain(events).cloned().collect();
        let mut applied = self.rules.apply(pacing, record, &all, clock, now);
        applied.replies.drain(..orphans.len());
        applied
    }

    /// The clock, measured by a first read if no call has measured it yet.
    async fn clock_now(&self) -> Result<StoreClock, Failure> {
        if let Some(clock) = *lock(&self.clock) {
            return Ok(clock);
        }
        // Any key will do: the read only wants the server's time.
        self.read(self.keys(&self.key(""))).await?;
        Ok((*lock(&self.clock)).expect("measured by the read"))
    }

    async fn read(&self, keys: Keys<'_>) -> Result<Trip<Found>, Failure> {
        let trip = self
            .scripts
            .read(&self.connection, keys, self.call_timeout.get())
            .await;
        self.counted(trip)
    }

    /// The keys of a call on the record `key`, made by this process.
    fn keys<'a>(&'a self, key: &'a str) -> Keys<'a> {
        Keys {
            record: key,
            fleet: &self.fleet_key,
            holder: self.rules.holder(),
        }
    }

    /// Counts a call and its failure; a successful one measures the clock and the fleet.
    fn counted<T>(&self, trip: Result<Trip<T>, Failure>) -> Result<Trip<T>, Failure> {
        bump(&self.counters.calls);
        self.metrics.call();
        match trip {
            Ok(trip) => {
                self.fleet.store(trip.fleet, Ordering::Relaxed);
                self.call_timeout
                    .answered(trip.received.saturating_duration_since(trip.sent));
                let mut clock = lock(&self.clock);
                *clock = Some(StoreClock::measured(
                    *clock,
                    trip.sent,
                    trip.received,
                    trip.server,
                ));
                Ok(trip)
            }
            Err(error) => {
                bump(&self.counters.errors);
                self.metrics.error();
                if let StoreError::Timeout(timeout) = error.error {
                    // A round trip at least this long: the next call waits longer, so that a
                    // Redis grown slow is not taken for a lost one at every try.
                    self.call_timeout.answered(timeout);
                }
                Err(error)
            }
        }
    }

    /// A call's `events` and its `applied` answer: `record` at `version` is what this process
    /// knows of the endpoint now.
    fn remember(
        &self,
        endpoint: &str,
        version: u64,
        record: Record,
        events: &[Event],
        applied: &Applied,
        now: Instant,
    ) {
        let mut cache = lock(&self.cache);
        let entry = cache
            .entry(endpoint.to_owned())
            .or_insert_with(|| Cached::new(now));
        entry.settled(&self.rules, events, applied, &record);
        entry.version = version;
        entry.record = record;
        entry.read_at = now;
        entry.fallback = None;
    }

    /// The state to start a record from when Redis has none but this process paced the
    /// endpoint alone meanwhile (Redis restarted empty), on the clock the read just measured.
    fn seed(&self, endpoint: &str, now: Instant) -> Option<Record> {
        let clock = (*lock(&self.clock))?;
        let cache = lock(&self.cache);
        let fallback = cache.get(endpoint)?.fallback.as_ref()?;
        Some(fallback.seed(clock, now))
    }

    /// Answers from the fallback: the endpoint's last known state at this process's share.
    fn apply_locally(
        &self,
        pacing: &PacingRules,
        endpoint: &str,
        events: &[Event],
        now: Instant,
        error: StoreError,
    ) -> Applied {
        bump(&self.counters.fallback_answers);
        let clock = *lock(&self.clock).get_or_insert_with(|| StoreClock::unmeasured(now));
        let mut cache = lock(&self.cache);
        let entry = cache
            .entry(endpoint.to_owned())
            .or_insert_with(|| Cached::new(now));
        let fleet = self.fleet.load(Ordering::Relaxed);
        let fallback = entry.fallback.get_or_insert_with(|| {
            Fallback::enter(&entry.record, pacing, &self.rules, clock, now, fleet)
        });
        fallback.apply(&self.rules, events, now, error)
    }
}

// The guide's code blocks are compiled and run as doctests, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/fleets.md")]
struct GuideDoctests;
