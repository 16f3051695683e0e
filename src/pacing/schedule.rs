//! When the pacer is predicted to release the request at each place of an endpoint's queue: the
//! wait a request that joins is told (checked against its deadline), and the resend time of a
//! request it cannot take. Pure arithmetic on instants and rates, tested without a clock.
//!
//! A down or paused endpoint releases nothing until its next probe (or the end of its pause);
//! after that, the ramp doubles its rate every interval from the probe rate (slow start), up to
//! the rate the endpoint took at its last loss when the pacer knows one. A ramping endpoint
//! releases at its current rate (its growth is left out: the prediction errs late, never early).

use std::time::Duration;
use tokio::time::Instant;

/// The predicted release of every place in the queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Schedule {
    /// The first release: not before the next probe, the end of a pause, or the next slot.
    pub(crate) first: Instant,
    /// The release rate at `first`, per second.
    pub(crate) rate: f64,
    /// Whether the rate doubles every `interval` after `first` (slow start), up to `cap`.
    pub(crate) doubling: Option<Duration>,
    /// The most the rate is predicted to reach, per second.
    pub(crate) cap: f64,
}

impl Schedule {
    /// Everything goes at once (an open endpoint).
    pub(crate) fn now(now: Instant) -> Self {
        Self {
            first: now,
            rate: f64::INFINITY,
            doubling: None,
            cap: f64::INFINITY,
        }
    }

    /// When the request at `position` (0: the head) is released.
    pub(crate) fn release_at(&self, position: usize) -> Instant {
        self.first + secs(self.offset(position as f64))
    }

    /// Seconds from `first` to the release of `position` (fractional places allowed).
    fn offset(&self, position: f64) -> f64 {
        if position <= 0.0 || self.rate.is_infinite() {
            return 0.0;
        }
        let rate = self.rate.max(f64::MIN_POSITIVE);
        let cap = self.cap.max(rate);
        let Some(interval) = self.doubling.map(|d| d.as_secs_f64()) else {
            return position / rate;
        };
        // Slow start: the rate at `t` is `rate * 2^(t / interval)`, so `t` seconds release
        // `rate * interval / ln 2 * (2^(t / interval) - 1)` requests, until the cap.
        let per = rate * interval / std::f64::consts::LN_2;
        let until_cap = interval * (cap / rate).log2();
        let released_by_cap = per * (cap / rate - 1.0);
        if position <= released_by_cap {
            interval * (1.0 + position / per).log2()
        } else {
            until_cap + (position - released_by_cap) / cap
        }
    }

    /// The time between the release of `position` and the next one.
    pub(crate) fn gap_at(&self, position: usize) -> Duration {
        let position = position as f64;
        secs(self.offset(position + 1.0) - self.offset(position))
    }
}

/// When a request the pacer cannot take should be sent again, from now: `after`, plus a jitter
/// in `[0, spread]` that the request draws from its own random stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resend {
    pub(crate) after: Duration,
    pub(crate) spread: Duration,
}

/// `seconds` as a duration, saturated (a rate near zero predicts a very long wait, not a panic).
fn secs(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds.clamp(0.0, 1e9)).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn slow_start(now: Instant, cap: f64) -> Schedule {
        Schedule {
            first: now + 300 * MS,
            rate: 2.0,
            doubling: Some(100 * MS),
            cap,
        }
    }

    #[test]
    fn nothing_is_released_before_the_first_release() {
        let now = Instant::now();
        let schedule = slow_start(now, f64::INFINITY);
        assert_eq!(schedule.release_at(0), now + 300 * MS);
        assert!(schedule.release_at(1) > now + 300 * MS);
    }

    #[test]
    fn a_constant_rate_releases_one_place_per_gap() {
        let now = Instant::now();
        let schedule = Schedule {
            first: now,
            rate: 100.0,
            doubling: None,
            cap: 100.0,
        };
        assert_eq!(schedule.release_at(50), now + 500 * MS);
        assert_eq!(schedule.gap_at(7), 10 * MS);
    }

    #[test]
    fn slow_start_releases_what_doubling_every_interval_releases() {
        let now = Instant::now();
        let schedule = slow_start(now, f64::INFINITY);
        // 2/s doubling every 100 ms: ten intervals reach 2,048/s, having released about
        // 2 * 0.1 / ln 2 * (2^10 - 1) = 295 requests.
        let tenth = schedule.release_at(295) - schedule.first;
        assert!((990 * MS..=1010 * MS).contains(&tenth), "{tenth:?}");
        assert!(
            schedule.gap_at(295) < schedule.gap_at(10),
            "the gaps shrink"
        );
    }

    #[test]
    fn a_known_rate_caps_the_slow_start_and_the_rest_goes_at_it() {
        let now = Instant::now();
        let schedule = slow_start(now, 1000.0);
        let capped = schedule.gap_at(10_000);
        assert!(
            (capped.as_secs_f64() - 0.001).abs() < 1e-9,
            "{capped:?} at the cap of 1,000/s"
        );
        let later = schedule.release_at(10_000) - schedule.release_at(9_000);
        assert!((999 * MS..=1001 * MS).contains(&later), "{later:?}");
    }

    #[test]
    fn the_release_of_a_later_place_is_never_earlier() {
        let now = Instant::now();
        for schedule in [slow_start(now, f64::INFINITY), slow_start(now, 50.0)] {
            let mut previous = schedule.release_at(0);
            for position in 1..5_000 {
                let at = schedule.release_at(position);
                assert!(at >= previous, "{position}");
                previous = at;
            }
        }
    }

    #[test]
    fn an_open_endpoint_releases_every_place_at_once() {
        let now = Instant::now();
        let schedule = Schedule::now(now);
        assert_eq!(schedule.release_at(1_000_000), now);
        assert_eq!(schedule.gap_at(3), Duration::ZERO);
    }

    #[test]
    fn a_rate_near_zero_predicts_a_long_wait_without_panicking() {
        let now = Instant::now();
        let schedule = Schedule {
            first: now,
            rate: 1e-300,
            doubling: None,
            cap: 1e-300,
        };
        assert!(schedule.release_at(usize::MAX) > now + Duration::from_secs(1_000_000));
    }
}
