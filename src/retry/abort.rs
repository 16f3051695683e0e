//! The abort signal: wakes every request sleeping in backoff so it returns its last outcome now.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Wakes sleeping retries: once ([`wake_sleepers`](Self::wake_sleepers)), for a while
/// ([`hold_until`](Self::hold_until)) or for good ([`shutdown`](Self::shutdown)).
///
/// A request sleeping before its next attempt holds on to its last response or error. When the
/// process shuts down, or a circuit breaker opens in front of the endpoint, waiting out the sleep
/// only delays a result that is already known. Give the same signal to
/// [`RetryLayerBuilder::abort_signal`](crate::RetryLayerBuilder::abort_signal) and trigger it:
/// every sleeping request returns its last outcome within one scheduler tick, with
/// [`StopReason::Aborted`](crate::StopReason::Aborted), and its budget token is refunded.
///
/// Clones share the signal.
///
/// ```
/// use tower_http_retry::AbortSignal;
///
/// let signal = AbortSignal::new();
/// let for_the_layer = signal.clone();
/// // ... on SIGTERM:
/// signal.shutdown();
/// assert!(for_the_layer.is_shut_down());
/// ```
#[derive(Clone, Default)]
pub struct AbortSignal {
    notify: Arc<Notify>,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    shut_down: AtomicBool,
    held_until: Mutex<Option<Instant>>,
}

impl AbortSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes every request that is sleeping now; later failures sleep as usual. A circuit
    /// breaker calls this when it opens.
    pub fn wake_sleepers(&self) {
        self.notify.notify_waiters();
    }

    /// Wakes every sleeping request and, until `until`, lets no failed request start a sleep:
    /// each returns its last outcome at once. A circuit breaker calls this when it opens, with
    /// the moment it will half-open, so that the attempt that was in flight when it opened does
    /// not sleep only to be refused. A later call replaces the moment.
    pub fn hold_until(&self, until: Instant) {
        *self.held_until() = Some(until);
        self.notify.notify_waiters();
    }

    /// Wakes every sleeping request and stops all later retries from sleeping: from now on a
    /// failure is returned at once. For process shutdown; it cannot be undone.
    pub fn shutdown(&self) {
        self.state.shut_down.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.state.shut_down.load(Ordering::SeqCst)
    }

    /// Whether a failed request may not sleep now: shut down, or held by
    /// [`hold_until`](Self::hold_until).
    pub(crate) fn forbids_sleep(&self) -> bool {
        self.is_shut_down()
            || self
                .held_until()
                .is_some_and(|until| Instant::now() < until)
    }

    fn held_until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.state
            .held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A future that completes at the next wake. Create it *before* checking
    /// [`forbids_sleep`](Self::forbids_sleep): a wake that happens in between still completes it.
    pub(crate) fn listen(&self) -> OwnedNotified {
        Arc::clone(&self.notify).notified_owned()
    }
}

impl fmt::Debug for AbortSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortSignal")
            .field("shut_down", &self.is_shut_down())
            .finish_non_exhaustive()
    }
}
