//! The paced endpoints of a layer, bounded in number, and what the retry layer holds of them:
//! the map ([`Pacer`]), one endpoint ([`Lane`], the narrow handle it books outcomes and asks for
//! pauses through), a request's place in the queue ([`QueueWait`]) and, once let through, its
//! pass ([`PassGuard`]).

use super::config::{Pacing, PacingConfig};
use super::endpoint::{EndpointState, PacingMode, Pass, Release, Signal};
use super::schedule::Resend;
use crate::random::RandomSource;
use http::uri::Authority;
use pin_project_lite::pin_project;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Every endpoint's state; shared by every clone of a layer.
pub(crate) struct Pacer {
    config: Pacing,
    random: RandomSource,
    map: Mutex<Map>,
}

#[derive(Default)]
struct Map {
    endpoints: HashMap<Option<Authority>, (Arc<Endpoint>, u64)>,
    clock: u64,
}

/// One endpoint: its state behind a lock whose critical sections are a few field updates.
struct Endpoint {
    config: Pacing,
    state: Mutex<EndpointState>,
}

/// The state and counters of one endpoint, as
/// [`RetryLayer::pacing_stats`](crate::RetryLayer::pacing_stats) reports them.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct PacingStats {
    /// What the endpoint is doing.
    pub mode: PacingMode,
    /// The release rate, per second (0 while open: requests are not paced).
    pub rate: f64,
    /// Requests waiting in its queue.
    pub waiting: usize,
    /// Probes let through since the endpoint was first seen.
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
        }
    }

    pub(crate) fn config(&self) -> &PacingConfig {
        self.config.config()
    }

    fn map(&self) -> MutexGuard<'_, Map> {
        // Plain data with no invariant to break half-way: a poisoned lock is usable.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The endpoint of `authority`, made if needed; `None` when the map is full and no endpoint
    /// in it can be forgotten (the request is then not paced).
    pub(crate) fn lane(&self, authority: Option<&Authority>) -> Option<Lane> {
        let mut map = self.map();
        map.clock += 1;
        let tick = map.clock;
        if let Some((endpoint, used)) = map.endpoints.get_mut(&authority.cloned()) {
            *used = tick;
            return Some(Lane(Arc::clone(endpoint)));
        }
        if map.endpoints.len() >= self.config().max_endpoints && !evict(&mut map, Instant::now()) {
            return None;
        }
        let endpoint = Arc::new(Endpoint {
            config: self.config.clone(),
            state: Mutex::new(EndpointState::new(Instant::now(), self.random.stream())),
        });
        map.endpoints
            .insert(authority.cloned(), (Arc::clone(&endpoint), tick));
        Some(Lane(endpoint))
    }

    /// Whether requests to `authority` wait for the pacer now (its endpoint is known and
    /// paced). Makes no endpoint.
    pub(crate) fn is_paced(&self, authority: Option<&Authority>) -> bool {
        let endpoint = match self.map().endpoints.get(&authority.cloned()) {
            Some((endpoint, _)) => Arc::clone(endpoint),
            None => return false,
        };
        endpoint.is_paced()
    }

    /// How long a request to `authority` that joined its queue at `now` would wait, if the
    /// endpoint is known and paced. Makes no endpoint.
    pub(crate) fn predicted_release(
        &self,
        authority: Option<&Authority>,
        now: Instant,
    ) -> Option<Duration> {
        let endpoint = Arc::clone(&self.map().endpoints.get(&authority.cloned())?.0);
        let mut state = endpoint.lock();
        state.advance(endpoint.config(), now);
        state
            .is_paced()
            .then(|| state.predicted_wait(endpoint.config(), state.queue.len(), now))
    }

    /// The state of `authority`'s endpoint, if it has one.
    pub(crate) fn stats(&self, authority: Option<&Authority>) -> Option<PacingStats> {
        let endpoint = self.map().endpoints.get(&authority.cloned())?.0.clone();
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
                state.advance(endpoint.config(), now);
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
    fn lock(&self) -> MutexGuard<'_, EndpointState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn config(&self) -> &PacingConfig {
        self.config.config()
    }

    fn stats(&self) -> PacingStats {
        self.update(|state, config| {
            state.advance(config, Instant::now());
            false
        });
        let state = self.lock();
        PacingStats {
            mode: state.mode(),
            rate: state.rate(self.config()),
            waiting: state.queue.len(),
            probes: state.probes,
            deferred: state.deferred,
        }
    }

    /// Whether requests to this endpoint wait in its queue now.
    fn is_paced(&self) -> bool {
        self.lock().is_paced()
    }

    /// Applies `change` to the state; wakes the head of the queue when it says the head may
    /// look again, and on every change of mode: a head waits on a timer, or on nothing while a
    /// probe is in flight, and a new mode may mean a new time to go (or a first one).
    fn update(&self, change: impl FnOnce(&mut EndpointState, &PacingConfig) -> bool) {
        let mut state = self.lock();
        let before = state.mode();
        if change(&mut state, self.config()) || state.mode() != before {
            state.wake_head();
        }
    }

    /// Records what an outcome says; wakes the head of the queue if that may let it go.
    fn record(&self, pass: Option<Pass>, signal: Signal, now: Instant) {
        self.update(|state, config| state.record(config, pass, signal, now));
    }

    /// The retry budget said no while the endpoint is open: pace it.
    fn budget_empty(&self, now: Instant) {
        self.update(|state, config| {
            state.budget_empty(config, now);
            false
        });
    }

    /// The endpoint asked for a pause until `until`.
    fn pause_until(&self, until: Instant, now: Instant) {
        self.update(|state, config| {
            state.pause_until(config, until, now);
            false
        });
    }

    /// A circuit breaker refused a request for `wait` (zero: its half-open probe is in flight).
    fn breaker_refused(&self, wait: Duration, now: Instant) {
        self.update(|state, config| {
            state.breaker_refused(config, wait, now);
            false
        });
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
        let config = self.config();
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
        Ok(QueueWait {
            endpoint: Arc::clone(self),
            id,
            timer: None,
            done: false,
        })
    }
}

/// What the retry layer holds of one endpoint: it books outcomes to it, asks it to pause, and
/// joins its queue, through this handle and nothing else.
#[derive(Clone)]
pub(crate) struct Lane(Arc<Endpoint>);

impl Lane {
    /// Whether requests to this endpoint wait in its queue now.
    pub(crate) fn is_paced(&self) -> bool {
        self.0.is_paced()
    }

    /// Records what the outcome of an attempt that was not let through by the pacer says.
    pub(crate) fn record(&self, signal: Signal, now: Instant) {
        self.0.record(None, signal, now);
    }

    /// The retry budget said no while the endpoint is open: pace it.
    pub(crate) fn budget_empty(&self, now: Instant) {
        self.0.budget_empty(now);
    }

    /// The endpoint asked for a pause until `until`.
    pub(crate) fn pause_until(&self, until: Instant, now: Instant) {
        self.0.pause_until(until, now);
    }

    /// A circuit breaker refused a request for `wait` (zero: its half-open probe is in flight).
    pub(crate) fn breaker_refused(&self, wait: Duration, now: Instant) {
        self.0.breaker_refused(wait, now);
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
        state.take_turn_away(self.0.config(), now);
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

pin_project! {
    /// A request's place in an endpoint's queue; completes when the pacer lets it go.
    /// Dropping it frees the place.
    pub(crate) struct QueueWait {
        endpoint: Arc<Endpoint>,
        id: u64,
        // Only the head of the queue waits on a timer, for the next release.
        #[pin]
        timer: Option<Sleep>,
        done: bool,
    }

    impl PinnedDrop for QueueWait {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if !*this.done {
                this.endpoint.lock().remove(*this.id);
            }
        }
    }
}

impl QueueWait {
    /// The request's deadline came before the pacer let it go: it is counted as deferred, and
    /// handed back with when to send it again (see [`resend_after`](Self::resend_after)).
    pub(crate) fn defer(&self, now: Instant) -> Resend {
        self.endpoint.lock().deferred += 1;
        self.resend_after(now)
    }

    /// When a request that leaves its place now, unreleased, should be sent again, from `now`:
    /// its place's predicted release, jittered within the place's gap (a burst that joined
    /// together and leaves together is so spread by position).
    pub(crate) fn resend_after(&self, now: Instant) -> Resend {
        let state = self.endpoint.lock();
        let position = state
            .queue
            .iter()
            .position(|waiter| waiter.id == self.id)
            .unwrap_or(state.queue.len());
        state.resend_from(self.endpoint.config(), position, now)
    }

    /// A first attempt whose deadline came in the queue is handed back unsent: it counts as
    /// deferred.
    pub(crate) fn deferred(&self) {
        self.endpoint.lock().deferred += 1;
    }

    /// `Ready` with the request's pass once the pacer lets it go.
    pub(crate) fn poll_release(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PassGuard> {
        let mut this = self.project();
        loop {
            let now = Instant::now();
            let mut state = this.endpoint.lock();
            let head = state.queue.front().map(|waiter| waiter.id);
            if head != Some(*this.id) {
                if let Some(waiter) = state.queue.iter_mut().find(|w| w.id == *this.id) {
                    waiter.waker = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            let release = state.try_release(this.endpoint.config(), now);
            match release {
                Release::Now(pass) => {
                    state.queue.pop_front();
                    crate::telemetry::queue_left(1);
                    state.wake_head();
                    *this.done = true;
                    return Poll::Ready(PassGuard {
                        endpoint: Arc::clone(this.endpoint),
                        pass: Some(pass),
                    });
                }
                Release::Blocked | Release::At(_) => {
                    // Blocked behind a probe in flight: its outcome wakes the head, and so does
                    // a change of mode; the timer is a backstop that looks again a probe
                    // interval later, whatever happened meanwhile.
                    let at = match release {
                        Release::At(at) => at,
                        _ => now + this.endpoint.config().probe_interval,
                    };
                    if let Some(waiter) = state.queue.front_mut() {
                        waiter.waker = Some(cx.waker().clone());
                    }
                    drop(state);
                    match this.timer.as_mut().as_pin_mut() {
                        Some(timer) => timer.reset(at),
                        None => this.timer.set(Some(tokio::time::sleep_until(at))),
                    }
                    let timer = this.timer.as_mut().as_pin_mut().expect("just set");
                    if timer.poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}

/// How an attempt was let through; its outcome is recorded with it. Dropped unrecorded (the
/// request was cancelled), it gives a probe's slot back.
pub(crate) struct PassGuard {
    endpoint: Arc<Endpoint>,
    pass: Option<Pass>,
}

impl PassGuard {
    /// The endpoint the pass is for.
    pub(crate) fn lane(&self) -> Lane {
        Lane(Arc::clone(&self.endpoint))
    }

    /// Records the attempt's outcome.
    pub(crate) fn record(mut self, signal: Signal, now: Instant) {
        self.endpoint.record(self.pass.take(), signal, now);
    }
}

impl Drop for PassGuard {
    fn drop(&mut self) {
        if let Some(pass) = self.pass.take() {
            self.endpoint
                .record(Some(pass), Signal::Neutral, Instant::now());
        }
    }
}
