//! How long one Redis call may take before the fallback answers: a fixed time the application
//! set, or by default one derived from the round trips this process measured, so that a Redis
//! that answers in a millisecond on a quiet network and one that answers in twenty on a loaded
//! machine are each given what they need, and neither is taken for lost.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Round trips remembered: the slowest of them sets the timeout.
const WINDOW: usize = 64;
/// Round trips measured before the measured timeout is used (the ceiling until then).
const MIN_SAMPLES: usize = 8;
/// The timeout is this many times the slowest recent round trip...
const FACTOR: u32 = 4;
/// ... at least this (a fast Redis: a stall is still seen within a few milliseconds)...
pub(crate) const FLOOR: Duration = Duration::from_millis(5);
/// ... and at most this (what a request waits, once per episode, on a Redis that stopped).
pub(crate) const CEILING: Duration = Duration::from_millis(250);

/// A store's call timeout.
#[derive(Debug)]
pub(crate) enum CallTimeout {
    /// Set by the application.
    Fixed(Duration),
    /// Derived from the last round trips.
    Measured(Mutex<RoundTrips>),
}

/// The last [`WINDOW`] round trips, in a ring.
#[derive(Debug, Default)]
pub(crate) struct RoundTrips {
    recent: Vec<Duration>,
    next: usize,
}

impl RoundTrips {
    fn record(&mut self, trip: Duration) {
        if self.recent.len() < WINDOW {
            self.recent.push(trip);
        } else {
            self.recent[self.next] = trip;
        }
        self.next = (self.next + 1) % WINDOW;
    }

    fn timeout(&self) -> Duration {
        if self.recent.len() < MIN_SAMPLES {
            return CEILING;
        }
        let slowest = self.recent.iter().max().copied().unwrap_or_default();
        (slowest * FACTOR).clamp(FLOOR, CEILING)
    }
}

impl CallTimeout {
    /// The default: measured.
    pub(crate) fn measured() -> Self {
        Self::Measured(Mutex::new(RoundTrips::default()))
    }

    /// The timeout of the next call.
    pub(crate) fn get(&self) -> Duration {
        match self {
            Self::Fixed(timeout) => *timeout,
            Self::Measured(trips) => trips
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .timeout(),
        }
    }

    /// A call was answered after `trip`, or timed out after `trip` (its time counts as a round
    /// trip: a measured timeout then grows fourfold per timeout, up to the ceiling).
    pub(crate) fn answered(&self, trip: Duration) {
        if let Self::Measured(trips) = self {
            // Plain data: a poisoned lock is usable.
            trips
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(trip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_measured_timeout_follows_the_slowest_recent_round_trip_within_its_bounds() {
        let timeout = CallTimeout::measured();
        assert_eq!(timeout.get(), CEILING, "nothing measured yet");
        for _ in 0..MIN_SAMPLES {
            timeout.answered(MS / 2);
        }
        assert_eq!(timeout.get(), FLOOR, "a fast Redis: the floor");
        timeout.answered(12 * MS);
        assert_eq!(timeout.get(), 48 * MS, "four times the slowest");
        for _ in 0..WINDOW - 1 {
            timeout.answered(2 * MS);
        }
        assert_eq!(timeout.get(), 48 * MS, "the slow one still in the window");
        timeout.answered(2 * MS);
        assert_eq!(timeout.get(), 8 * MS, "and out of it");
        timeout.answered(Duration::from_secs(1));
        assert_eq!(timeout.get(), CEILING);
    }

    #[test]
    fn timeouts_grow_the_measured_timeout_to_a_redis_grown_slow() {
        let timeout = CallTimeout::measured();
        for _ in 0..MIN_SAMPLES {
            timeout.answered(MS / 2);
        }
        // Redis now answers in 30 ms: each call that times out counts its timeout.
        let mut tries = 0;
        while timeout.get() < 30 * MS {
            let waited = timeout.get();
            timeout.answered(waited);
            tries += 1;
        }
        assert_eq!((tries, timeout.get()), (2, 80 * MS), "5 -> 20 -> 80 ms");
    }

    #[test]
    fn a_fixed_timeout_is_what_was_set() {
        let timeout = CallTimeout::Fixed(7 * MS);
        timeout.answered(Duration::from_secs(1));
        assert_eq!(timeout.get(), 7 * MS);
    }
}
