//! The abort signal: wakes every request sleeping in backoff so it returns its last outcome now.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

/// Wakes sleeping retries, once ([`wake_sleepers`](Self::wake_sleepers)) or for good
/// ([`shutdown`](Self::shutdown)).
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
    shut_down: Arc<AtomicBool>,
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

    /// Wakes every sleeping request and stops all later retries from sleeping: from now on a
    /// failure is returned at once. For process shutdown; it cannot be undone.
    pub fn shutdown(&self) {
        self.shut_down.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::SeqCst)
    }

    /// A future that completes at the next wake. Create it *before* checking
    /// [`is_shut_down`](Self::is_shut_down): a wake that happens in between still completes it.
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
