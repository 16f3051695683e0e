//! The time limits of one logical request, both counted from the call: the layer's deadline,
//! which bounds the waits, and the request's own (gRPC's `grpc-timeout`, read by the attempt
//! hook), which bounds the attempts too and is sent with each one as the time left.

use std::time::Duration;
use tokio::time::Instant;

/// A request's deadlines. Without either, the clock is never read.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Deadline {
    /// When the request started, if it has a deadline.
    started: Option<Instant>,
    /// The layer's deadline.
    layer: Option<Duration>,
    /// The request's own deadline.
    own: Option<Duration>,
}

impl Deadline {
    /// The deadlines of a request made at `now` (read only when there is one).
    #[inline]
    pub(crate) fn new(
        layer: Option<Duration>,
        own: Option<Duration>,
        now: impl FnOnce() -> Instant,
    ) -> Self {
        Self {
            started: (layer.is_some() || own.is_some()).then(now),
            layer,
            own,
        }
    }

    /// When the request started, if it has a deadline.
    #[cfg(test)]
    pub(crate) fn started(&self) -> Option<Instant> {
        self.started
    }

    /// When the deadline falls, if there is one.
    pub(crate) fn at(&self) -> Option<Instant> {
        Some(self.started? + self.limit()?)
    }

    /// The time the request may take from its start: the layer's deadline, or the request's
    /// own when that is shorter.
    fn limit(&self) -> Option<Duration> {
        match (self.layer, self.own) {
            (layer, Some(own)) => Some(layer.map_or(own, |layer| layer.min(own))),
            (layer, None) => layer,
        }
    }

    /// How long the request may still wait at `now` (`Duration::MAX` without a deadline).
    pub(crate) fn room(&self, now: Instant) -> Duration {
        match (self.limit(), self.started) {
            (Some(limit), Some(started)) => {
                limit.saturating_sub(now.saturating_duration_since(started))
            }
            _ => Duration::MAX,
        }
    }

    /// The time left of the request's own deadline at `now`: what the next attempt carries.
    /// The layer's deadline is not sent: it bounds the waits, not an attempt in flight.
    pub(crate) fn own_left(&self, now: Instant) -> Option<Duration> {
        let (own, started) = (self.own?, self.started?);
        Some(own.saturating_sub(now.saturating_duration_since(started)))
    }

    /// Whether the deadline has passed at `now`: a retry whose service became ready only then
    /// is not sent.
    pub(crate) fn passed(&self, now: Instant) -> bool {
        let past_layer = match (self.layer, self.started) {
            (Some(limit), Some(started)) => now.saturating_duration_since(started) > limit,
            _ => false,
        };
        past_layer || self.own_left(now) == Some(Duration::ZERO)
    }

    /// Whether a wait of `delay` from `now` ends in time for the next attempt. The layer's
    /// deadline bounds the waits, so a wait may end on it; the request's own deadline bounds the
    /// attempt too, so the attempt needs time left.
    pub(crate) fn fits(&self, delay: Duration, now: Instant) -> bool {
        delay <= self.room(now) && self.own_left(now).map_or(true, |left| delay < left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn start() -> Instant {
        Instant::now()
    }

    #[test]
    fn without_a_deadline_the_clock_is_not_read_and_everything_fits() {
        let deadline = Deadline::new(None, None, || unreachable!("no deadline, no clock"));
        let now = start();
        assert_eq!(deadline.at(), None);
        assert_eq!(deadline.room(now), Duration::MAX);
        assert_eq!(deadline.own_left(now), None);
        assert!(!deadline.passed(now + Duration::from_secs(3600)));
        assert!(deadline.fits(Duration::from_secs(3600), now));
    }

    #[test]
    fn a_wait_may_end_on_the_layer_deadline_but_not_past_it() {
        let t0 = start();
        let deadline = Deadline::new(Some(100 * MS), None, || t0);
        assert_eq!(deadline.at(), Some(t0 + 100 * MS));
        assert_eq!(deadline.room(t0 + 30 * MS), 70 * MS);
        assert!(deadline.fits(70 * MS, t0 + 30 * MS));
        assert!(!deadline.fits(71 * MS, t0 + 30 * MS));
        assert!(!deadline.passed(t0 + 100 * MS));
        assert!(deadline.passed(t0 + 101 * MS));
        assert_eq!(deadline.own_left(t0), None);
    }

    #[test]
    fn the_own_deadline_leaves_the_attempt_time_to_run() {
        let t0 = start();
        let deadline = Deadline::new(None, Some(100 * MS), || t0);
        assert_eq!(deadline.own_left(t0 + 30 * MS), Some(70 * MS));
        assert!(deadline.fits(69 * MS, t0 + 30 * MS));
        assert!(!deadline.fits(70 * MS, t0 + 30 * MS));
        assert!(!deadline.passed(t0 + 99 * MS));
        assert!(deadline.passed(t0 + 100 * MS));
    }

    #[test]
    fn the_shorter_of_the_two_bounds_the_waits() {
        let t0 = start();
        let layer_shorter = Deadline::new(Some(50 * MS), Some(100 * MS), || t0);
        assert_eq!(layer_shorter.at(), Some(t0 + 50 * MS));
        // Only the request's own deadline is sent with the attempt.
        assert_eq!(layer_shorter.own_left(t0), Some(100 * MS));
        let own_shorter = Deadline::new(Some(100 * MS), Some(50 * MS), || t0);
        assert_eq!(own_shorter.at(), Some(t0 + 50 * MS));
        assert_eq!(own_shorter.room(t0 + 20 * MS), 30 * MS);
    }
}
