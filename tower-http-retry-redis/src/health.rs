//! [`Health`]: whether Redis is reachable, as this process's calls found it, and when to try it
//! again while it is not (after 250 ms, then at doubling waits up to 5 s).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tower_http_retry::pacing::store::StoreError;

/// The first wait before a process that lost the store tries it again; it doubles up to
/// [`MAX_REJOIN_WAIT`] while the store stays away.
const FIRST_REJOIN_WAIT: Duration = Duration::from_millis(250);
const MAX_REJOIN_WAIT: Duration = Duration::from_secs(5);

/// Redis joined or away; the store counts and logs the changes this reports.
#[derive(Default)]
pub(crate) struct Health(Mutex<State>);

#[derive(Default)]
enum State {
    #[default]
    Joined,
    Away {
        error: StoreError,
        /// The next call after this tries the store again.
        retry_at: Instant,
        wait: Duration,
    },
}

impl Health {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Plain data: a poisoned lock is usable.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `Some` while Redis is away and not due for another try. The first call at or after the
    /// due time tries it (and moves the due time on, so that the calls beside it do not).
    pub(crate) fn away(&self, now: Instant) -> Option<StoreError> {
        match &mut *self.state() {
            State::Joined => None,
            State::Away {
                error,
                retry_at,
                wait,
            } => {
                if now < *retry_at {
                    return Some(error.clone());
                }
                *wait = (*wait * 2).min(MAX_REJOIN_WAIT);
                *retry_at = now + *wait;
                None
            }
        }
    }

    /// Whether Redis is away and not due for another try (without claiming the try).
    pub(crate) fn is_away(&self, now: Instant) -> bool {
        matches!(*self.state(), State::Away { retry_at, .. } if now < retry_at)
    }

    /// Redis failed with `error`: whether this starts an episode (it was joined).
    pub(crate) fn lost(&self, error: &StoreError, now: Instant) -> bool {
        let mut state = self.state();
        match &mut *state {
            State::Away { error: last, .. } => {
                *last = error.clone();
                false
            }
            State::Joined => {
                *state = State::Away {
                    error: error.clone(),
                    retry_at: now + FIRST_REJOIN_WAIT,
                    wait: FIRST_REJOIN_WAIT,
                };
                true
            }
        }
    }

    /// Redis answered: whether this ends an episode (it was away).
    pub(crate) fn joined(&self) -> bool {
        let mut state = self.state();
        let was_away = matches!(*state, State::Away { .. });
        *state = State::Joined;
        was_away
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn an_episode_starts_once_and_is_tried_again_at_doubling_waits() {
        let (health, now) = (Health::default(), Instant::now());
        let error = StoreError::Timeout(5 * MS);
        assert!(health.lost(&error, now), "an episode starts");
        assert!(!health.lost(&error, now), "the same episode");
        assert_eq!(health.away(now + 100 * MS), Some(error.clone()));
        assert!(health.is_away(now + 100 * MS));
        // Due at 250 ms: that call tries Redis; the next try is 500 ms later.
        assert_eq!(health.away(now + 250 * MS), None);
        assert!(health.is_away(now + 700 * MS));
        assert!(!health.is_away(now + 750 * MS));
        assert!(health.joined(), "the episode ends");
        assert!(!health.joined());
        assert_eq!(health.away(now), None);
    }
}
