//! One endpoint behind its lock ([`Endpoint`]), shared by the map (`endpoints.rs`), the
//! requests waiting in its queue and their passes (`queue.rs`); the narrow handle the retry
//! layer holds of it ([`Lane`]); and with a store, the pump that sends the store what the
//! endpoint has to tell the fleet, one call at a time, outside the lock.

use super::config::Pacing;
use super::endpoint::{EndpointState, StoreNext};
use super::mode::PacingMode;
use super::pass::Pass;
#[cfg(doc)]
use super::queue::QueueWait;
use super::rules::PacingRules;
use super::shared::{SharedState, Signal};
use crate::hedge::SharedSketch;
use crate::pacing::store::Applied;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tokio::time::Instant;

/// One endpoint: its state behind a lock whose critical sections are a few field updates.
pub(crate) struct Endpoint {
    pub(crate) config: Pacing,
    /// Its name in the map and in a fleet's store.
    pub(crate) key: Arc<str>,
    state: Mutex<Slot>,
    /// The pacer's count of unsettled endpoints.
    unsettled: Arc<AtomicUsize>,
    /// The latencies of each copy the hedging layer that claimed the pacer sent
    /// ([`HedgeLayerBuilder::retry_layer`](crate::hedge::HedgeLayerBuilder::retry_layer)),
    /// made by its first request; behind a lock of its own, as reading a histogram is more than
    /// a few field updates, and shared with the requests in flight, which hold it and not this.
    hedge_sketch: OnceLock<Arc<SharedSketch>>,
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

impl Endpoint {
    /// The endpoint named `key`, in `state`, counted in `unsettled` while it is not settled.
    pub(crate) fn new(
        config: Pacing,
        key: Arc<str>,
        state: EndpointState,
        unsettled: Arc<AtomicUsize>,
    ) -> Self {
        let endpoint = Self {
            config,
            key,
            state: Mutex::new(Slot {
                state,
                counted: false,
            }),
            unsettled,
            hedge_sketch: OnceLock::new(),
        };
        drop(endpoint.lock()); // counted if it starts paced
        endpoint
    }

    /// The hedging layer's sketch of the endpoint, made by `make` if need be.
    pub(crate) fn hedge_sketch(&self, make: impl FnOnce() -> SharedSketch) -> Arc<SharedSketch> {
        Arc::clone(self.hedge_sketch.get_or_init(|| Arc::new(make())))
    }

    /// Whether a hedging layer keeps a sketch here.
    pub(crate) fn has_hedge_sketch(&self) -> bool {
        self.hedge_sketch.get().is_some()
    }

    /// The hedge delay as the sketch last read it, if there is a sketch.
    pub(crate) fn hedge_delay(&self) -> Option<Duration> {
        self.hedge_sketch.get()?.sketch().delay()
    }

    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            slot: self.state.lock().unwrap_or_else(PoisonError::into_inner),
            unsettled: &self.unsettled,
        }
    }

    pub(crate) fn pacing(&self) -> &PacingRules {
        self.config.rules()
    }

    /// Applies `change` to the state; wakes the head of the queue when it says the head may
    /// look again, and on every change of mode: a head waits on a timer, or on nothing while a
    /// probe is in flight, and a new mode may mean a new time to go (or a first one). With a
    /// store, what the change has to tell the fleet is sent.
    pub(crate) fn update(
        self: &Arc<Self>,
        change: impl FnOnce(&mut EndpointState, &PacingRules) -> bool,
    ) {
        let watch = {
            let mut state = self.lock();
            let before = state.mode();
            if change(&mut state, self.pacing()) || state.mode() != before {
                state.wake_head();
            }
            state.watch_idle()
        };
        if watch {
            self.watch_idle();
        }
        pump(self);
    }

    /// Moves the endpoint on with time while nobody calls it, until it opens, probes or has
    /// requests waiting (which move it on themselves): an endpoint that recovered and went idle
    /// reads open in its gauge and stats. Held weakly: an endpoint forgotten ends its watch.
    fn watch_idle(self: &Arc<Self>) {
        let endpoint = Arc::downgrade(self);
        let every = self.pacing().idle_to_open;
        let spawned = spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(endpoint) = endpoint.upgrade() else {
                    return;
                };
                let again = endpoint
                    .lock()
                    .watched_idle(endpoint.pacing(), Instant::now());
                pump(&endpoint);
                if !again {
                    return;
                }
            }
        });
        if !spawned {
            self.lock().watched = false;
        }
    }

    /// Records what an outcome says; wakes the head of the queue if that may let it go. `sent`:
    /// when the attempt went, if the endpoint's limit counted it in flight.
    pub(crate) fn record(
        self: &Arc<Self>,
        pass: Option<Pass>,
        sent: Option<Instant>,
        signal: Signal,
        now: Instant,
    ) {
        self.update(|state, config| {
            if let Some(sent) = sent {
                let latency = now.saturating_duration_since(sent);
                state.finished(Some(latency), signal == Signal::Success, now);
            }
            // A place in flight freed: the head looks again.
            state.record(config, pass, signal, now) || sent.is_some()
        });
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
        let Some(store) = endpoint.config.store() else {
            return false;
        };
        let now = Instant::now();
        match store.cached(endpoint.pacing(), &endpoint.key, now) {
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
        self.0.record(None, None, signal, now);
    }

    /// Whether a request to this endpoint goes through its queue now: it is paced, or its
    /// limit counts what is in flight (adaptive concurrency).
    pub(crate) fn queues(&self) -> bool {
        self.0.config.concurrency().is_some() || self.is_paced()
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

    /// A first attempt turned away at `now` ([`QueueWait::join`]) is handed back unsent: it
    /// counts as deferred and takes its place behind the queue.
    pub(crate) fn turned_away(&self, now: Instant) {
        let mut state = self.0.lock();
        state.deferred += 1;
        state.take_turn_away(self.0.pacing(), now);
    }
}

/// Sends what `endpoint` has to send its store, until nothing is left: an answer ready at once
/// (an in-process store) is taken in place; a pending one on a task of its own, which goes on
/// from there when it is answered.
pub(crate) fn pump(endpoint: &Arc<Endpoint>) {
    let Some(store) = endpoint.config.store().cloned() else {
        return;
    };
    loop {
        let now = Instant::now();
        let next = endpoint.lock().next_call(endpoint.pacing(), now);
        let events = match next {
            StoreNext::Nothing => return,
            StoreNext::Timer(at) => {
                let endpoint = Arc::clone(endpoint);
                spawn(async move {
                    tokio::time::sleep_until(at).await;
                    endpoint.lock().report_timer_fired();
                    pump(&endpoint);
                });
                return;
            }
            StoreNext::Call(events) => events,
        };
        let pacing = endpoint.config.clone();
        let key = Arc::clone(&endpoint.key);
        let store = Arc::clone(&store);
        let mut call =
            Box::pin(async move { store.apply(pacing.rules(), &key, &events, now).await });
        match poll_once(call.as_mut()) {
            Some(applied) => endpoint.adopted(Some(applied), now, now),
            None => {
                let later = Arc::clone(endpoint);
                let spawned = spawn(async move {
                    let applied = call.await;
                    later.adopted(Some(applied), now, Instant::now());
                    pump(&later);
                });
                if !spawned {
                    endpoint.adopted(None, now, now);
                }
                return;
            }
        }
    }
}

impl Endpoint {
    fn adopted(&self, applied: Option<Applied>, now: Instant, answered: Instant) {
        self.lock().adopt(self.pacing(), applied, now, answered);
    }
}

/// Runs `task` on the current tokio runtime; `false` outside one.
fn spawn(task: impl Future<Output = ()> + Send + 'static) -> bool {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(task);
            true
        }
        Err(_) => false,
    }
}

/// Polls `future` once, with a waker that does nothing: its answer if it has one already.
fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Option<F::Output> {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    match future.poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}
