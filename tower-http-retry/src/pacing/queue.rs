//! A request's place in an endpoint's queue ([`QueueWait`]) and, once the pacer lets it go, its
//! pass ([`PassGuard`]), which books the attempt's outcome to the endpoint.

use super::handle::{pump, Endpoint, Lane};
use super::pass::{Pass, Release};
use super::schedule::Resend;
use super::shared::Signal;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Why a request cannot wait in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deferred {
    /// When sending it again makes sense.
    pub(crate) resend: Resend,
}

pin_project! {
    /// A request's place in an endpoint's queue; completes when the pacer lets it go.
    /// Dropping it frees the place.
    pub(crate) struct QueueWait {
        endpoint: Arc<Endpoint>,
        id: u64,
        // Only the head of the queue waits on a timer, for the next release: boxed, so that the
        // others do not carry one.
        timer: Option<Pin<Box<Sleep>>>,
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
    /// Joins `lane`'s queue, unless it is full or the predicted wait is longer than `room`:
    /// then the request is deferred, with when to send it again. A request turned away is
    /// counted as deferred and takes its place behind the queue for its resend time, unless it
    /// is a `first` attempt: that one is sent unless its classifier hands it back unsent
    /// ([`Lane::turned_away`] then counts it).
    pub(crate) fn join(
        lane: &Lane,
        room: Duration,
        now: Instant,
        first: bool,
    ) -> Result<Self, Deferred> {
        let endpoint = &lane.0;
        let config = endpoint.pacing();
        let mut state = endpoint.lock();
        let wait = state.predicted_wait(config, state.queue.len(), now);
        if wait > room.min(config.max_queue_wait) || state.queue.len() >= config.max_waiters {
            let resend = if first {
                state.peek_turn_away(config, now)
            } else {
                state.deferred += 1;
                state.turn_away(config, now)
            };
            return Err(Deferred { resend });
        }
        let id = state.enqueue(config, now).expect("the queue has room");
        Ok(Self::new(Arc::clone(endpoint), id))
    }

    /// With adaptive concurrency, the pass of a request that goes at once, without a place in
    /// the queue: nobody waits and the limit and the pacer let it go now. `None`: it joins the
    /// queue.
    pub(crate) fn admit(lane: &Lane, now: Instant) -> Option<PassGuard> {
        let endpoint = &lane.0;
        let mut state = endpoint.lock();
        if state.limit.is_none() || !state.queue.is_empty() {
            return None;
        }
        match state.try_release(endpoint.pacing(), now) {
            Release::Now(pass) => Some(PassGuard {
                endpoint: Arc::clone(endpoint),
                pass: Some(pass),
                sent: Some(now),
            }),
            _ => None,
        }
    }

    /// With adaptive concurrency, the pass of a first attempt the queue turned away and that is
    /// sent all the same (its classifier cannot hand it back): it counts in flight, over the
    /// limit if need be, so that the limit sees what reaches the endpoint. `None` without a
    /// limit. Its outcome is booked as an unpaced request's.
    pub(crate) fn counted(lane: &Lane, now: Instant) -> Option<PassGuard> {
        let endpoint = &lane.0;
        let mut state = endpoint.lock();
        state.limit.as_mut()?.sent();
        Some(PassGuard {
            endpoint: Arc::clone(endpoint),
            pass: None,
            sent: Some(now),
        })
    }

    /// The endpoint whose queue this is.
    pub(crate) fn lane(&self) -> Lane {
        Lane(Arc::clone(&self.endpoint))
    }

    fn new(endpoint: Arc<Endpoint>, id: u64) -> Self {
        Self {
            endpoint,
            id,
            timer: None,
            done: false,
        }
    }

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
        state.resend_from(self.endpoint.pacing(), position, now)
    }

    /// A first attempt whose deadline came in the queue is handed back unsent: it counts as
    /// deferred.
    pub(crate) fn deferred(&self) {
        self.endpoint.lock().deferred += 1;
    }

    /// `Ready` with the request's pass once the pacer lets it go.
    pub(crate) fn poll_release(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PassGuard> {
        let this = self.project();
        // Looks again after an answer the store gave at once, but not forever.
        let mut answered_at_once = 0;
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
            let release = state.try_release(this.endpoint.pacing(), now);
            match release {
                Release::Now(pass) => {
                    state.queue.pop_front();
                    crate::telemetry::queue_left(&state.labels, 1);
                    state.wake_head();
                    *this.done = true;
                    let sent = state.limit.is_some().then_some(now);
                    return Poll::Ready(PassGuard {
                        endpoint: Arc::clone(this.endpoint),
                        pass: Some(pass),
                        sent,
                    });
                }
                Release::Blocked | Release::At(_) | Release::Asked => {
                    // Blocked behind a probe in flight: its outcome wakes the head, and so does
                    // a change of mode (or the store's answer, when one was asked); the timer is
                    // a backstop that looks again a probe interval later, whatever happened
                    // meanwhile.
                    let at = match release {
                        Release::At(at) => at,
                        _ => now + this.endpoint.pacing().probe_interval,
                    };
                    if let Some(waiter) = state.queue.front_mut() {
                        waiter.waker = Some(cx.waker().clone());
                    }
                    drop(state);
                    if release == Release::Asked {
                        // The call may be answered at once (an in-process store): look again.
                        pump(this.endpoint);
                        if answered_at_once < 2 && this.endpoint.lock().answered() {
                            answered_at_once += 1;
                            continue;
                        }
                    }
                    let timer = match this.timer {
                        Some(timer) => {
                            timer.as_mut().reset(at);
                            timer
                        }
                        None => this.timer.insert(Box::pin(tokio::time::sleep_until(at))),
                    };
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}

/// How an attempt was let through; its outcome is recorded with it. Dropped unrecorded (the
/// request was cancelled), it gives a probe's slot back, and its place in flight.
pub(crate) struct PassGuard {
    endpoint: Arc<Endpoint>,
    pass: Option<Pass>,
    /// When it went, if the endpoint's limit counts it in flight.
    sent: Option<Instant>,
}

impl PassGuard {
    /// The endpoint the pass is for.
    pub(crate) fn lane(&self) -> Lane {
        Lane(Arc::clone(&self.endpoint))
    }

    /// Records the attempt's outcome.
    pub(crate) fn record(mut self, signal: Signal, now: Instant) {
        let sent = self.sent.take();
        self.endpoint.record(self.pass.take(), sent, signal, now);
    }
}

impl Drop for PassGuard {
    fn drop(&mut self) {
        let (pass, cancelled) = (self.pass.take(), self.sent.take().is_some());
        if pass.is_none() && !cancelled {
            return;
        }
        let now = Instant::now();
        self.endpoint.update(|state, config| {
            // A cancelled attempt frees its place in flight but says nothing of the latency.
            if cancelled {
                state.finished(None, false, now);
            }
            let recorded =
                pass.is_some_and(|pass| state.record(config, Some(pass), Signal::Neutral, now));
            recorded || cancelled
        });
    }
}
