//! The abort signal: wakes requests sleeping in backoff so they return their last outcome now.

use http::uri::Authority;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Wakes sleeping retries: once ([`wake_sleepers`](Self::wake_sleepers)), for a while
/// ([`hold_until`](Self::hold_until), or for one upstream only,
/// [`hold_authority_until`](Self::hold_authority_until)) or for good
/// ([`shutdown`](Self::shutdown)).
///
/// A request sleeping before its next attempt holds on to its last response or error. When the
/// process shuts down, or a circuit breaker opens in front of the endpoint, waiting out the sleep
/// only delays a result that is already known. Give the same signal to
/// [`RetryLayerBuilder::abort_signal`](crate::RetryLayerBuilder::abort_signal) and trigger it:
/// every sleeping request concerned returns its last outcome within one scheduler tick, with
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
    /// Bumped by every wake that concerns all sleepers ([`AbortSignal::wake_sleepers`],
    /// [`AbortSignal::shutdown`]); a sleeper that sees it change was woken for good.
    wakes: AtomicU64,
    holds: Mutex<Holds>,
}

/// Until when failed requests may not sleep: all of them, or those to one authority.
#[derive(Default)]
struct Holds {
    everyone: Option<Instant>,
    no_authority: Option<Instant>,
    authorities: HashMap<Authority, Instant>,
}

/// What a sleeping request listens with.
pub(crate) struct Listener {
    /// Completes at the next wake of any kind.
    pub(crate) notified: OwnedNotified,
    /// The wake count when the request started listening.
    pub(crate) seen_wakes: u64,
}

impl AbortSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes every request that is sleeping now; later failures sleep as usual.
    pub fn wake_sleepers(&self) {
        self.state.wakes.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Wakes every sleeping request and, until `until`, lets no failed request start a sleep:
    /// each returns its last outcome at once. A circuit breaker calls this when it opens, with
    /// the moment it will half-open, so that no request sleeps only to be refused, the attempt
    /// that was in flight when it opened included. A hold already in force for longer stays.
    pub fn hold_until(&self, until: Instant) {
        extend(&mut self.holds().everyone, until);
        self.notify.notify_waiters();
    }

    /// Like [`hold_until`](Self::hold_until), for the requests to one authority only (`None`:
    /// requests whose URI has none). Requests to other authorities keep sleeping and retrying.
    /// A breaker per authority calls this when one of its circuits opens.
    pub fn hold_authority_until(&self, authority: Option<&Authority>, until: Instant) {
        let mut holds = self.holds();
        match authority {
            Some(authority) => {
                // Expired holds go, so the map only ever holds the circuits open now.
                let now = Instant::now();
                holds.authorities.retain(|_, held| *held > now);
                let held = holds.authorities.entry(authority.clone()).or_insert(until);
                *held = (*held).max(until);
            }
            None => extend(&mut holds.no_authority, until),
        }
        drop(holds);
        self.notify.notify_waiters();
    }

    /// Wakes every sleeping request and stops all later retries from sleeping: from now on a
    /// failure is returned at once. For process shutdown; it cannot be undone.
    pub fn shutdown(&self) {
        self.state.shut_down.store(true, Ordering::SeqCst);
        self.wake_sleepers();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.state.shut_down.load(Ordering::SeqCst)
    }

    /// Whether a failed request to `authority` may not sleep now: shut down, or held.
    pub(crate) fn forbids_sleep(&self, authority: Option<&Authority>) -> bool {
        if self.is_shut_down() {
            return true;
        }
        let holds = self.holds();
        let held = match authority {
            Some(authority) => holds.authorities.get(authority).copied(),
            None => holds.no_authority,
        };
        let now = Instant::now();
        [holds.everyone, held]
            .into_iter()
            .flatten()
            .any(|until| now < until)
    }

    /// Whether a request that listened with `listener` and has just been woken must stop: woken
    /// for everyone since it listened, or its authority is now held.
    pub(crate) fn ends_sleep(&self, listener_wakes: u64, authority: Option<&Authority>) -> bool {
        self.state.wakes.load(Ordering::SeqCst) != listener_wakes || self.forbids_sleep(authority)
    }

    /// Starts listening for wakes. Check [`ends_sleep`](Self::ends_sleep) or
    /// [`forbids_sleep`](Self::forbids_sleep) *after* this: a wake in between still completes the
    /// listener.
    pub(crate) fn listen(&self) -> Listener {
        let seen_wakes = self.state.wakes.load(Ordering::SeqCst);
        Listener {
            notified: Arc::clone(&self.notify).notified_owned(),
            seen_wakes,
        }
    }

    fn holds(&self) -> MutexGuard<'_, Holds> {
        // Plain data with no invariant to break half-way: a poisoned lock is usable.
        self.state
            .holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Holds until `until`, or longer if a hold in force already lasts longer.
fn extend(held: &mut Option<Instant>, until: Instant) {
    *held = Some(held.map_or(until, |held| held.max(until)));
}

impl fmt::Debug for AbortSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortSignal")
            .field("shut_down", &self.is_shut_down())
            .finish_non_exhaustive()
    }
}
