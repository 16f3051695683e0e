//! The shared state's clock in the process's terms. Every time in a shared state is a [`Nanos`]
//! of the clock of whoever keeps it: an endpoint's own epoch when it paces alone, Redis `TIME`
//! for a fleet. A process maps its tokio clock onto it with an offset, measured on every round
//! trip to a remote store, so the processes' clocks never need to agree with each other.
//! Nanoseconds, so that a state kept in the process is exactly as precise as tokio's
//! [`Instant`] (a mapping there and back gives the instant it started from).

use std::time::Duration;
use tokio::time::Instant;

/// Nanoseconds on the clock of a shared state (Redis `TIME`; an endpoint's own epoch).
pub(crate) type Nanos = u64;

/// Where an epoch is placed on a clock of the process's own: far enough from 0 (about 13
/// days) that instants before it map too.
pub(crate) const LOCAL_EPOCH: Nanos = 1 << 50;

/// A local instant and the shared time it stands for: a fixed offset between the two clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Clock {
    epoch: Instant,
    at_epoch: Nanos,
}

/// A sample that disagrees with the offset in use by more than its own uncertainty plus this
/// replaces it (the store's clock was stepped, or the first sample was a slow one).
const TOLERANCE: Duration = Duration::from_millis(1);

impl Clock {
    /// The clock on which `epoch` is `at_epoch`.
    pub(crate) fn new(epoch: Instant, at_epoch: Nanos) -> Self {
        Self { epoch, at_epoch }
    }

    /// A clock of the process's own, starting at `epoch`.
    pub(crate) fn local(epoch: Instant) -> Self {
        Self::new(epoch, LOCAL_EPOCH)
    }

    /// `t` in shared time (0 at the earliest).
    pub(crate) fn to_shared(self, t: Instant) -> Nanos {
        match t.checked_duration_since(self.epoch) {
            Some(after) => self.at_epoch.saturating_add(nanos(after)),
            None => self
                .at_epoch
                .saturating_sub(nanos(self.epoch.duration_since(t))),
        }
    }

    /// `m` in local time.
    pub(crate) fn to_local(self, m: Nanos) -> Instant {
        if m >= self.at_epoch {
            self.epoch + Duration::from_nanos(m - self.at_epoch)
        } else {
            let before = Duration::from_nanos(self.at_epoch - m);
            self.epoch.checked_sub(before).unwrap_or(self.epoch)
        }
    }

    /// The clock a round trip measured: sent at `sent`, answered at `received`, the store's time
    /// then `server`. Kept unless the new sample disagrees with it by more than the sample's
    /// uncertainty (half its round trip) plus [`TOLERANCE`].
    pub(crate) fn measured(
        current: Option<Clock>,
        sent: Instant,
        received: Instant,
        server: Nanos,
    ) -> Clock {
        let half = received.saturating_duration_since(sent) / 2;
        let sample = Clock::new(sent + half, server);
        match current {
            Some(clock) => {
                let ours = clock.to_shared(sent + half);
                if ours.abs_diff(server) > nanos(half + TOLERANCE) {
                    sample
                } else {
                    clock
                }
            }
            None => sample,
        }
    }
}

/// `d` in nanoseconds, saturated.
pub(crate) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn local_and_shared_times_map_both_ways_around_the_epoch() {
        let epoch = Instant::now() + 1000 * MS;
        let clock = Clock::new(epoch, 5_000_000_000);
        for t in [
            epoch,
            epoch + 250 * MS,
            epoch - 250 * MS,
            epoch + Duration::from_nanos(7),
        ] {
            assert_eq!(clock.to_local(clock.to_shared(t)), t);
        }
        assert_eq!(clock.to_shared(epoch + MS), 5_001_000_000);
        assert_eq!(clock.to_shared(epoch - MS), 4_999_000_000);
    }

    #[test]
    fn an_agreeing_sample_keeps_the_offset_and_a_stepped_clock_replaces_it() {
        let sent = Instant::now();
        let first = Clock::measured(None, sent, sent + 4 * MS, 1_000_000_000_000);
        // 100 ms later the store says 100.3 ms more: within 1 ms, kept.
        let later = sent + 100 * MS;
        let kept = Clock::measured(Some(first), later, later + 2 * MS, 1_000_100_300_000);
        assert_eq!(kept, first);
        // The store's clock jumped a second.
        let moved = Clock::measured(Some(first), later, later + 2 * MS, 1_001_100_000_000);
        assert_ne!(moved, first);
        assert_eq!(moved.to_shared(later + MS), 1_001_100_000_000);
    }
}
