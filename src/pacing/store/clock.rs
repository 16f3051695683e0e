//! The store's clock in the process's terms. Every time in a shared state is a [`Micros`] of
//! the store's clock (Redis `TIME`); a process maps its own tokio clock onto it with an offset it
//! measures on every round trip, so the processes' clocks never need to agree with each other.

use super::state::Micros;
use std::time::Duration;
use tokio::time::Instant;

/// A local instant and the store time it stands for: a fixed offset between the two clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Clock {
    epoch: Instant,
    at_epoch: Micros,
}

#[cfg(any(test, feature = "redis"))]
/// A sample that disagrees with the offset in use by more than its own uncertainty plus this
/// replaces it (the store's clock was stepped, or the first sample was a slow one).
const TOLERANCE: Duration = Duration::from_millis(1);

impl Clock {
    /// The clock on which `epoch` is `at_epoch`.
    pub(crate) fn new(epoch: Instant, at_epoch: Micros) -> Self {
        Self { epoch, at_epoch }
    }

    /// `t` in store time (0 at the earliest).
    pub(crate) fn to_store(self, t: Instant) -> Micros {
        match t.checked_duration_since(self.epoch) {
            Some(after) => self.at_epoch.saturating_add(micros(after)),
            None => self
                .at_epoch
                .saturating_sub(micros(self.epoch.duration_since(t))),
        }
    }

    /// `m` in local time.
    pub(crate) fn to_local(self, m: Micros) -> Instant {
        if m >= self.at_epoch {
            self.epoch + Duration::from_micros(m - self.at_epoch)
        } else {
            let before = Duration::from_micros(self.at_epoch - m);
            self.epoch.checked_sub(before).unwrap_or(self.epoch)
        }
    }

    #[cfg(any(test, feature = "redis"))]
    /// The clock a round trip measured: sent at `sent`, answered at `received`, the store's time
    /// then `server`. Kept unless the new sample disagrees with it by more than the sample's
    /// uncertainty (half its round trip) plus [`TOLERANCE`].
    pub(crate) fn measured(
        current: Option<Clock>,
        sent: Instant,
        received: Instant,
        server: Micros,
    ) -> Clock {
        let half = received.saturating_duration_since(sent) / 2;
        let sample = Clock::new(sent + half, server);
        match current {
            Some(clock) => {
                let ours = clock.to_store(sent + half);
                if ours.abs_diff(server) > micros(half + TOLERANCE) {
                    sample
                } else {
                    clock
                }
            }
            None => sample,
        }
    }
}

fn micros(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn local_and_store_times_map_both_ways_around_the_epoch() {
        let epoch = Instant::now() + 1000 * MS;
        let clock = Clock::new(epoch, 5_000_000);
        for t in [epoch, epoch + 250 * MS, epoch - 250 * MS] {
            assert_eq!(clock.to_local(clock.to_store(t)), t);
        }
        assert_eq!(clock.to_store(epoch + MS), 5_001_000);
        assert_eq!(clock.to_store(epoch - MS), 4_999_000);
    }

    #[test]
    fn an_agreeing_sample_keeps_the_offset_and_a_stepped_clock_replaces_it() {
        let sent = Instant::now();
        let first = Clock::measured(None, sent, sent + 4 * MS, 1_000_000_000);
        // 100 ms later the store says 100.3 ms more: within 1 ms, kept.
        let later = sent + 100 * MS;
        let kept = Clock::measured(Some(first), later, later + 2 * MS, 1_000_100_300);
        assert_eq!(kept, first);
        // The store's clock jumped a second.
        let moved = Clock::measured(Some(first), later, later + 2 * MS, 1_001_100_000);
        assert_ne!(moved, first);
        assert_eq!(moved.to_store(later + MS), 1_001_100_000);
    }
}
