//! The abort signal: wakes requests sleeping in backoff so they return their last outcome now.

use http::uri::Authority;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
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
/// [`RetryLayerBuilder::abort_signal`](crate::retry::RetryLayerBuilder::abort_signal) and trigger
/// it: every sleeping request concerned returns its last outcome within one scheduler tick, and its
/// budget token is refunded. The report says which:
/// [`StopReason::Aborted`](crate::StopReason::Aborted) after [`shutdown`](Self::shutdown) or
/// [`wake_sleepers`](Self::wake_sleepers) (the process is stopping),
/// [`StopReason::Held`](crate::StopReason::Held) while a hold is in force (a breaker opened; not
/// final: [`RetryReport::resend_after`](crate::RetryReport::resend_after) is the time until the
/// hold ends).
///
/// Instants are tokio's ([`tokio::time::Instant`]), so that paused time in tests moves them.
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
    state: Arc<State>,
}

/// Sleepers of different authorities listen on different notifiers, so that a hold for one
/// upstream wakes about `1 / SHARDS` of the sleepers of the others instead of all of them. (A
/// notifier per authority would need a map, and a lock, on every sleep.)
const SHARDS: usize = 64;

struct State {
    shut_down: AtomicBool,
    /// Bumped by every wake that concerns all sleepers ([`AbortSignal::wake_sleepers`],
    /// [`AbortSignal::shutdown`]); a sleeper that sees it change was woken for good.
    wakes: AtomicU64,
    /// Woken by everything that concerns every sleeper.
    everyone: Arc<Notify>,
    /// Woken by a hold for an authority in the shard.
    shards: [Arc<Notify>; SHARDS],
    /// When the latest hold ends, in nanoseconds after `origin` (0: none ever). A request that
    /// fails after it takes no lock to learn that nothing holds it: the common case.
    horizon: AtomicU64,
    origin: Instant,
    holds: Mutex<Holds>,
}

impl Default for State {
    fn default() -> Self {
        Self {
            shut_down: AtomicBool::new(false),
            wakes: AtomicU64::new(0),
            everyone: Arc::default(),
            shards: std::array::from_fn(|_| Arc::default()),
            horizon: AtomicU64::new(0),
            origin: Instant::now(),
            holds: Mutex::default(),
        }
    }
}

/// Until when failed requests may not sleep: all of them, or those to one authority.
#[derive(Default)]
struct Holds {
    everyone: Option<Instant>,
    no_authority: Option<Instant>,
    authorities: HashMap<Authority, Instant>,
}

/// Why a request may not sleep now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Forbidden {
    /// [`AbortSignal::shutdown`], or a [`AbortSignal::wake_sleepers`] since the request started
    /// listening.
    Shutdown,
    /// A hold (a circuit breaker that opened) until this instant.
    Held(Instant),
}

/// What a sleeping request listens with.
pub(crate) struct Listener {
    /// Completes at the next wake that concerns every sleeper.
    pub(crate) everyone: OwnedNotified,
    /// Completes at the next hold for an authority of the request's shard.
    pub(crate) shard: OwnedNotified,
    /// The wake count when the request started listening.
    pub(crate) seen_wakes: u64,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("seen_wakes", &self.seen_wakes)
            .finish_non_exhaustive()
    }
}

impl AbortSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes every request that is sleeping now ([`StopReason::Aborted`](crate::StopReason::Aborted));
    /// later failures sleep as usual.
    pub fn wake_sleepers(&self) {
        self.state.wakes.fetch_add(1, Ordering::SeqCst);
        self.state.everyone.notify_waiters();
    }

    /// Wakes every sleeping request and, until `until` (tokio's clock), lets no failed request
    /// start a sleep: each returns its last outcome at once, with
    /// [`StopReason::Held`](crate::StopReason::Held). A circuit breaker calls this when it
    /// opens, with the moment it will half-open, so that no request sleeps only to be refused,
    /// the attempt that was in flight when it opened included. A hold already in force for
    /// longer stays.
    pub fn hold_until(&self, until: Instant) {
        let mut holds = self.holds();
        extend(&mut holds.everyone, until);
        self.publish(until);
        drop(holds);
        self.state.everyone.notify_waiters();
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
        self.publish(until);
        drop(holds);
        self.state.shards[shard(authority)].notify_waiters();
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

    /// Until when a failed request to `authority` may not sleep (tokio's clock), if a hold is in
    /// force for it now.
    pub fn held_until(&self, authority: Option<&Authority>) -> Option<Instant> {
        let now = Instant::now();
        if self.nanos(now) >= self.state.horizon.load(Ordering::SeqCst) {
            return None; // no hold reaches this far: no lock
        }
        let holds = self.holds();
        let held = match authority {
            Some(authority) => holds.authorities.get(authority).copied(),
            None => holds.no_authority,
        };
        [holds.everyone, held]
            .into_iter()
            .flatten()
            .filter(|until| now < *until)
            .max()
    }

    /// Whether, and why, a request that listened with `seen_wakes` may not sleep (or go on
    /// sleeping) now: shut down, woken for everyone since it listened, or its authority held.
    pub(crate) fn forbids(
        &self,
        seen_wakes: u64,
        authority: Option<&Authority>,
    ) -> Option<Forbidden> {
        if self.is_shut_down() || self.state.wakes.load(Ordering::SeqCst) != seen_wakes {
            return Some(Forbidden::Shutdown);
        }
        self.held_until(authority).map(Forbidden::Held)
    }

    /// Starts listening for wakes that concern a request to `authority`, then checks whether it
    /// may sleep now: in this order, so that a shutdown, wake or hold in between still reaches
    /// the listener (the one protocol every wait before a retry starts with).
    pub(crate) fn listen_checked(
        &self,
        authority: Option<&Authority>,
    ) -> (Listener, Option<Forbidden>) {
        let listener = self.listen(authority);
        let forbidden = self.forbids(listener.seen_wakes, authority);
        (listener, forbidden)
    }

    /// Starts listening for wakes that concern a request to `authority`. Check
    /// [`forbids`](Self::forbids) *after* this: a wake in between completes the listener or
    /// changes the wake count it saw.
    pub(crate) fn listen(&self, authority: Option<&Authority>) -> Listener {
        // The count first: a wake between the two is seen by `forbids`, one after both completes
        // the notifiers.
        let seen_wakes = self.state.wakes.load(Ordering::SeqCst);
        Listener {
            everyone: Arc::clone(&self.state.everyone).notified_owned(),
            shard: Arc::clone(&self.state.shards[shard(authority)]).notified_owned(),
            seen_wakes,
        }
    }

    /// Raises the horizon to `until`. Called under the holds lock, so horizons only grow.
    fn publish(&self, until: Instant) {
        self.state
            .horizon
            .fetch_max(self.nanos(until).max(1), Ordering::SeqCst);
    }

    fn nanos(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.state.origin);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }

    fn holds(&self) -> MutexGuard<'_, Holds> {
        // Plain data with no invariant to break half-way: a poisoned lock is usable.
        self.state
            .holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The notifier shard of `authority`'s sleepers.
fn shard(authority: Option<&Authority>) -> usize {
    let Some(authority) = authority else {
        return 0;
    };
    let mut hasher = DefaultHasher::new();
    authority.hash(&mut hasher);
    (hasher.finish() % SHARDS as u64) as usize
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn no_hold_is_seen_without_the_lock_once_every_hold_has_ended() {
        let signal = AbortSignal::new();
        let a = Authority::from_static("a.test");
        assert_eq!(signal.held_until(Some(&a)), None);
        let until = Instant::now() + Duration::from_secs(1);
        signal.hold_authority_until(Some(&a), until);
        assert_eq!(signal.held_until(Some(&a)), Some(until));
        assert_eq!(
            signal.held_until(Some(&Authority::from_static("b.test"))),
            None
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(signal.held_until(Some(&a)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_between_listening_and_checking_is_not_lost() {
        let signal = AbortSignal::new();
        let listener = signal.listen(None);
        signal.wake_sleepers();
        assert_eq!(
            signal.forbids(listener.seen_wakes, None),
            Some(Forbidden::Shutdown)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_for_one_authority_does_not_wake_another_shard() {
        let signal = AbortSignal::new();
        let a = Authority::from_static("a.test");
        // Find an authority in another shard than `a`'s.
        let other = (0..)
            .map(|n| Authority::try_from(format!("b{n}.test")).unwrap())
            .find(|b| shard(Some(b)) != shard(Some(&a)))
            .unwrap();
        let listener = signal.listen(Some(&other));
        let mut shard_woken = tokio_test::task::spawn(listener.shard);
        let mut everyone_woken = tokio_test::task::spawn(listener.everyone);
        signal.hold_authority_until(Some(&a), Instant::now() + Duration::from_secs(1));
        assert!(shard_woken.poll().is_pending());
        assert!(everyone_woken.poll().is_pending());
        let same = signal.listen(Some(&a));
        let mut woken = tokio_test::task::spawn(same.shard);
        assert!(woken.poll().is_pending());
        signal.hold_authority_until(Some(&a), Instant::now() + Duration::from_secs(2));
        assert!(woken.poll().is_ready());
    }
}
