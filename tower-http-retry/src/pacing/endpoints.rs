//! The paced endpoints of a layer, bounded in number, and the narrow handle the retry layer
//! holds of one ([`Lane`]): it books outcomes and asks for pauses through it, and joins its
//! queue (`queue.rs`: a request's place, [`QueueWait`], and once let through its pass,
//! [`PassGuard`]).
//!
//! The map is keyed by the authority's text in lower case, so a lookup borrows the request's
//! authority and hashes it in one piece. A count of the endpoints that are not settled (open,
//! no congestion counted, nobody queued) is kept under each endpoint's lock: while it is zero,
//! a first attempt is not gated and a success records nothing, with no lock, no map lookup and
//! no clock read.

use super::config::{Pacing, PacingConfig};
use super::endpoint::{EndpointState, PacingMode, Pass};
use super::link::{pump, Link};
use super::queue::QueueWait;
use super::schedule::Resend;
use super::shared::{SharedState, Signal};
use crate::random::RandomSource;
use http::uri::Authority;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Every endpoint's state; shared by every clone of a layer.
pub(crate) struct Pacer {
    config: Pacing,
    random: RandomSource,
    map: Mutex<Map>,
    /// How many endpoints are not [settled](EndpointState::is_settled); shared with each of
    /// them, which keeps it up to date whenever its state is unlocked.
    unsettled: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Map {
    endpoints: HashMap<Box<str>, (Arc<Endpoint>, u64)>,
    clock: u64,
}

/// The map's key for `authority`: its text, ASCII-lowercased (authorities compare without
/// regard to case, as `Authority`'s own `Eq` and `Hash` do), and `""` for none (no authority is
/// empty). Borrowed unless the authority has an upper-case letter. It is also the endpoint's
/// name in a fleet's store.
fn key(authority: Option<&Authority>) -> Cow<'_, str> {
    match authority.map(Authority::as_str) {
        None => Cow::Borrowed(""),
        Some(text) if text.bytes().any(|byte| byte.is_ascii_uppercase()) => {
            Cow::Owned(text.to_ascii_lowercase())
        }
        Some(text) => Cow::Borrowed(text),
    }
}

/// One endpoint: its state behind a lock whose critical sections are a few field updates.
pub(crate) struct Endpoint {
    pub(crate) config: Pacing,
    /// Its name in the map and in a fleet's store.
    pub(crate) key: Arc<str>,
    state: Mutex<Slot>,
    /// The pacer's count of unsettled endpoints.
    unsettled: Arc<AtomicUsize>,
}

/// An endpoint's state, and whether it is counted as unsettled.
struct Slot {
    state: EndpointState,
    counted: bool,
}

/// An endpoint's state, locked. Unlocking it brings the pacer's count of unsettled endpoints
/// up to date, so that the count changes under the same lock as the state it counts.
pub(crate) struct Locked<'a> {
    slot: MutexGuard<'a, Slot>,
    unsettled: &'a AtomicUsize,
}

impl Deref for Locked<'_> {
    type Target = EndpointState;

    fn deref(&self) -> &EndpointState {
        &self.slot.state
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut EndpointState {
        &mut self.slot.state
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let unsettled = !self.slot.state.is_settled();
        if unsettled != self.slot.counted {
            self.slot.counted = unsettled;
            if unsettled {
                self.unsettled.fetch_add(1, Ordering::Release);
            } else {
                self.unsettled.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Forgotten (evicted) while counted: it no longer needs attention.
        let slot = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if slot.counted {
            self.unsettled.fetch_sub(1, Ordering::Release);
        }
    }
}

/// The state and counters of one endpoint, as
/// [`RetryLayer::pacing_stats`](crate::RetryLayer::pacing_stats) reports them.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct PacingStats {
    /// What the endpoint is doing (with a [store](crate::pacing::store), as this process last
    /// heard from the fleet, moved on with time).
    pub mode: PacingMode,
    /// The release rate, per second (0 while open: requests are not paced); with a store, the
    /// fleet's.
    pub rate: f64,
    /// Requests waiting in its queue (this layer's).
    pub waiting: usize,
    /// Probes this layer let through since the endpoint was first seen.
    pub probes: u64,
    /// Requests turned away (queue full, or a wait beyond their deadline).
    pub deferred: u64,
}

impl Pacer {
    pub(crate) fn new(config: Pacing, random: RandomSource) -> Self {
        Self {
            config,
            random,
            map: Mutex::default(),
            unsettled: Arc::default(),
        }
    }

    pub(crate) fn config(&self) -> &PacingConfig {
        self.config.config()
    }

    fn map(&self) -> MutexGuard<'_, Map> {
        // Plain data with no invariant to break half-way: a poisoned lock is usable.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether every endpoint is [settled](EndpointState::is_settled) (or there is none): then
    /// a success has nothing to record. An atomic load, no lock.
    pub(crate) fn all_settled(&self) -> bool {
        self.unsettled.load(Ordering::Acquire) == 0
    }

    /// The endpoint of `authority`, made if needed; `None` when the map is full and no endpoint
    /// in it can be forgotten (the request is then not paced).
    pub(crate) fn lane(&self, authority: Option<&Authority>) -> Option<Lane> {
        let key = key(authority);
        let mut map = self.map();
        map.clock += 1;
        let tick = map.clock;
        if let Some((endpoint, used)) = map.endpoints.get_mut(&*key) {
            *used = tick;
            return Some(Lane(Arc::clone(endpoint)));
        }
        let now = Instant::now();
        if map.endpoints.len() >= self.config().max_endpoints && !evict(&mut map, now) {
            return None;
        }
        let key: Arc<str> = Arc::from(key);
        let link = self.config().store.as_ref().map(|_| Link::default());
        let mut state = EndpointState::new(now, self.random.stream(), link);
        if let Some(store) = &self.config().store {
            // What the fleet is known to be doing, without a call.
            if let Some(view) = store.cached(&self.config, &key, now) {
                state.shared = SharedState::from_view(&view, &state.clock, now);
            }
        }
        let endpoint = Arc::new(Endpoint {
            config: self.config.clone(),
            key: Arc::clone(&key),
            state: Mutex::new(Slot {
                state,
                counted: false,
            }),
            unsettled: Arc::clone(&self.unsettled),
        });
        drop(endpoint.lock()); // counted if it starts paced
        map.endpoints
            .insert(Box::from(&*key), (Arc::clone(&endpoint), tick));
        Some(Lane(endpoint))
    }

    /// The endpoint of `authority` if the map has it (a success needs no new one). Counts as a
    /// use of it.
    pub(crate) fn existing(&self, authority: Option<&Authority>) -> Option<Lane> {
        let mut map = self.map();
        map.clock += 1;
        let tick = map.clock;
        let (endpoint, used) = map.endpoints.get_mut(&*key(authority))?;
        *used = tick;
        Some(Lane(Arc::clone(endpoint)))
    }

    /// Whether requests to `authority` wait for the pacer now (its endpoint is known and
    /// paced; with a store, or the fleet is known to pace it). Makes no endpoint, unless the
    /// fleet paces one this process has not met; takes no lock while every endpoint is settled
    /// and no store is shared.
    pub(crate) fn is_paced(&self, authority: Option<&Authority>) -> bool {
        let store = self.config().store.as_ref();
        if store.is_none() && self.all_settled() {
            return false;
        }
        let endpoint = self
            .map()
            .endpoints
            .get(&*key(authority))
            .map(|(endpoint, _)| Arc::clone(endpoint));
        match (endpoint, store) {
            (Some(endpoint), _) => Lane(endpoint).is_paced(),
            (None, None) => false,
            (None, Some(store)) => {
                let now = Instant::now();
                let paced = store
                    .cached(&self.config, &key(authority), now)
                    .is_some_and(|view| view.mode != PacingMode::Open);
                paced && self.lane(authority).is_some_and(|lane| lane.is_paced())
            }
        }
    }

    /// How long a request to `authority` that joined its queue at `now` would wait, if the
    /// endpoint is known and paced. Makes no endpoint.
    pub(crate) fn predicted_release(
        &self,
        authority: Option<&Authority>,
        now: Instant,
    ) -> Option<Duration> {
        let endpoint = Arc::clone(&self.map().endpoints.get(&*key(authority))?.0);
        let mut state = endpoint.lock();
        state.advance(endpoint.pacing(), now);
        let waiting = state.queue.len();
        state
            .is_paced()
            .then(|| state.predicted_wait(endpoint.pacing(), waiting, now))
    }

    /// The state of `authority`'s endpoint, if it has one.
    pub(crate) fn stats(&self, authority: Option<&Authority>) -> Option<PacingStats> {
        let endpoint = self.map().endpoints.get(&*key(authority))?.0.clone();
        Some(endpoint.stats())
    }
}

/// Forgets the least recently used endpoint that is open at `now` and that no request holds
/// (no waiter, no pass in flight). Returns whether one was forgotten.
fn evict(map: &mut Map, now: Instant) -> bool {
    let victim = map
        .endpoints
        .iter()
        .filter(|(_, (endpoint, _))| {
            Arc::strong_count(endpoint) == 1 && {
                // Nobody holds it, so nobody waits on it: its mode is moved on without a wake.
                let mut state = endpoint.lock();
                state.advance(endpoint.pacing(), now);
                state.mode() == PacingMode::Open
            }
        })
        .min_by_key(|(_, (_, used))| *used)
        .map(|(key, _)| key.clone());
    victim.is_some_and(|key| map.endpoints.remove(&key).is_some())
}

/// Why a request cannot wait in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deferred {
    /// When sending it again makes sense.
    pub(crate) resend: Resend,
}

impl Endpoint {
    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            slot: self.state.lock().unwrap_or_else(PoisonError::into_inner),
            unsettled: &self.unsettled,
        }
    }

    pub(crate) fn pacing(&self) -> &PacingConfig {
        self.config.config()
    }

    fn stats(&self) -> PacingStats {
        let mut state = self.lock();
        let before = state.mode();
        state.advance(self.pacing(), Instant::now());
        if state.mode() != before {
            state.wake_head();
        }
        PacingStats {
            mode: state.mode(),
            rate: state.rate(self.pacing()),
            waiting: state.queue.len(),
            probes: state.probes,
            deferred: state.deferred,
        }
    }

    /// Applies `change` to the state; wakes the head of the queue when it says the head may
    /// look again, and on every change of mode: a head waits on a timer, or on nothing while a
    /// probe is in flight, and a new mode may mean a new time to go (or a first one). With a
    /// store, what the change has to tell the fleet is sent.
    fn update(self: &Arc<Self>, change: impl FnOnce(&mut EndpointState, &PacingConfig) -> bool) {
        {
            let mut state = self.lock();
            let before = state.mode();
            if change(&mut state, self.pacing()) || state.mode() != before {
                state.wake_head();
            }
        }
        pump(self);
    }

    /// Records what an outcome says; wakes the head of the queue if that may let it go.
    pub(crate) fn record(self: &Arc<Self>, pass: Option<Pass>, signal: Signal, now: Instant) {
        self.update(|state, config| state.record(config, pass, signal, now));
    }

    /// Joins the queue, unless it is full or the predicted wait is longer than `room`. A
    /// request turned away is counted as deferred and takes its place behind the queue for its
    /// resend time, unless it is a `first` attempt: that one is sent unless its classifier hands
    /// it back unsent ([`Lane::turned_away`] then counts it).
    fn enqueue(
        self: &Arc<Self>,
        room: Duration,
        now: Instant,
        first: bool,
    ) -> Result<QueueWait, Deferred> {
        let config = self.pacing();
        let mut state = self.lock();
        let wait = state.predicted_wait(config, state.queue.len(), now);
        if wait > room || state.queue.len() >= config.max_waiters {
            let resend = if first {
                state.peek_turn_away(config, now)
            } else {
                state.deferred += 1;
                state.turn_away(config, now)
            };
            return Err(Deferred { resend });
        }
        let id = state.enqueue(config).expect("the queue has room");
        Ok(QueueWait::new(Arc::clone(self), id))
    }
}

/// What the retry layer holds of one endpoint: it books outcomes to it, asks it to pause, and
/// joins its queue, through this handle and nothing else.
#[derive(Clone)]
pub(crate) struct Lane(pub(crate) Arc<Endpoint>);

impl Lane {
    /// Whether requests to this endpoint wait in its queue now. With a store, an endpoint this
    /// process has open is looked up in what the store last heard of it (no call).
    pub(crate) fn is_paced(&self) -> bool {
        let endpoint = &self.0;
        if endpoint.lock().is_paced() {
            return true;
        }
        let Some(store) = &endpoint.pacing().store else {
            return false;
        };
        let now = Instant::now();
        match store.cached(&endpoint.config, &endpoint.key, now) {
            Some(view) if view.mode != PacingMode::Open => {
                let mut state = endpoint.lock();
                if !state.is_paced() && state.is_news(&view) {
                    state.shared = SharedState::from_view(&view, &state.clock, now);
                    state.settle();
                }
                state.is_paced()
            }
            _ => false,
        }
    }

    /// Records what the outcome of an attempt that was not let through by the pacer says.
    pub(crate) fn record(&self, signal: Signal, now: Instant) {
        self.0.record(None, signal, now);
    }

    /// The retry budget said no while the endpoint is open: pace it.
    pub(crate) fn budget_empty(&self, now: Instant) {
        self.0.update(|state, config| {
            state.budget_empty(config, now);
            false
        });
    }

    /// The endpoint asked for a pause until `until`.
    pub(crate) fn pause_until(&self, until: Instant, now: Instant) {
        self.0.update(|state, config| {
            state.pause_until(config, until, now);
            false
        });
    }

    /// A circuit breaker refused a request for `wait` (zero: its half-open probe is in flight).
    pub(crate) fn breaker_refused(&self, wait: Duration, now: Instant) {
        self.0.update(|state, config| {
            state.breaker_refused(config, wait, now);
            false
        });
    }

    /// A hint asked the request it answered to wait until `until`: a rate signal while the
    /// endpoint takes requests, a pause of the whole endpoint when nothing gets through.
    /// Returns whether the endpoint paused.
    pub(crate) fn hinted(&self, until: Instant, now: Instant) -> bool {
        let mut paused = false;
        self.0.update(|state, config| {
            paused = state.hinted(config, until, now);
            false
        });
        paused
    }

    /// A first attempt turned away at `now` ([`join`](Self::join)) is handed back unsent: it
    /// counts as deferred and takes its place behind the queue.
    pub(crate) fn turned_away(&self, now: Instant) {
        let mut state = self.0.lock();
        state.deferred += 1;
        state.take_turn_away(self.0.pacing(), now);
    }

    /// Joins the queue, unless it is full or the predicted wait is longer than `room`: then the
    /// request is deferred, with when to send it again (a `first` attempt is counted only once
    /// it is handed back unsent, see [`turned_away`](Self::turned_away)).
    pub(crate) fn join(
        &self,
        room: Duration,
        now: Instant,
        first: bool,
    ) -> Result<QueueWait, Deferred> {
        self.0.enqueue(room, now, first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authority(text: &str) -> Authority {
        text.parse().expect("a valid authority")
    }

    fn pacer(max_endpoints: usize) -> Pacer {
        let config = Pacing::builder()
            .outage_after(2)
            .max_endpoints(max_endpoints)
            .build()
            .expect("a valid configuration");
        Pacer::new(config, RandomSource::seeded(7))
    }

    #[test]
    fn the_pacer_counts_the_endpoints_a_success_would_change() {
        let pacer = pacer(8);
        let a = authority("a.test");
        assert!(pacer.all_settled());
        let lane = pacer.lane(Some(&a)).expect("room in the map");
        assert!(pacer.all_settled(), "a new endpoint is settled");
        let now = Instant::now();
        lane.record(Signal::Congestion, now);
        assert!(!pacer.all_settled(), "a congestion in a row is counted");
        assert!(!pacer.is_paced(Some(&a)), "still open");
        lane.record(Signal::Success, now);
        assert!(pacer.all_settled(), "a success resets the count");
        lane.record(Signal::Congestion, now);
        lane.record(Signal::Congestion, now);
        assert!(pacer.is_paced(Some(&a)), "down after outage_after(2)");
        let wait = lane.join(Duration::MAX, now, false).expect("room");
        drop(wait);
        assert!(!pacer.all_settled(), "probing, its queue empty again");
        assert!(
            pacer.existing(Some(&authority("A.Test"))).is_some(),
            "authorities compare without regard to case"
        );
        assert!(pacer.existing(Some(&authority("b.test"))).is_none());
        assert!(
            pacer.existing(None).is_none(),
            "a success makes no endpoint"
        );
    }

    #[test]
    fn an_endpoint_forgotten_while_counted_is_no_longer_counted() {
        let pacer = pacer(1);
        let now = Instant::now();
        let a = pacer.lane(Some(&authority("a.test"))).expect("room");
        a.record(Signal::Congestion, now);
        drop(a);
        assert!(!pacer.all_settled());
        // The map is full: a.test, open and held by nobody, is forgotten for b.test.
        let b = pacer
            .lane(Some(&authority("b.test")))
            .expect("a.test forgotten");
        assert!(pacer.existing(Some(&authority("a.test"))).is_none());
        assert!(
            pacer.all_settled(),
            "b.test is new, a.test's count went with it"
        );
        drop(b);
    }
}
