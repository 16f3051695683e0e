//! When the pacer is predicted to release the request at each place of an endpoint's queue: the
//! wait a request that joins is told (checked against its deadline), and the resend time of a
//! request it cannot take. Pure arithmetic on instants and rates, tested without a clock.
//!
//! A down or paused endpoint releases nothing until its next probe (or the end of its pause);
//! after that, the ramp doubles its rate every interval from the probe rate (slow start), up to
//! the rate the endpoint took at its last loss when the pacer knows one. A ramping endpoint in
//! slow start goes on doubling from its current rate; after a loss it releases at its current
//! rate (the cubic regain is left out: the prediction errs late).

use std::time::Duration;
use tokio::time::Instant;

/// The predicted release of every place in the queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Schedule {
    /// The first release: not before the next probe, the end of a pause, or the next slot.
    pub(crate) first: Instant,
    /// The release rate at `first`, per second.
    pub(crate) rate: f64,
    /// How the rate grows after `first`.
    pub(crate) growth: Growth,
}

/// How a predicted release rate grows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Growth {
    /// It stays.
    None,
    /// It doubles every `interval` (slow start), up to `cap`.
    Doubling { interval: Duration, cap: f64 },
    /// It is `to` once `after` has passed (a cubic regain of the rate of the last loss, taken
    /// at the end of the regain time: the prediction errs late).
    Step { after: Duration, to: f64 },
}

impl Schedule {
    /// Everything goes at once (an open endpoint).
    pub(crate) fn now(now: Instant) -> Self {
        Self {
            first: now,
            rate: f64::INFINITY,
            growth: Growth::None,
        }
    }

    /// When the request at `position` (0: the head; fractional places allowed) is released.
    pub(crate) fn release_at(&self, position: f64) -> Instant {
        self.first + secs(self.offset(position))
    }

    /// How many places are released by `at`: the inverse of [`release_at`](Self::release_at).
    pub(crate) fn released_by(&self, at: Instant) -> f64 {
        let t = at.saturating_duration_since(self.first).as_secs_f64();
        if self.rate.is_infinite() {
            return f64::INFINITY;
        }
        let rate = self.rate.max(f64::MIN_POSITIVE);
        match self.growth {
            Growth::None => t * rate,
            Growth::Doubling { interval, cap } => {
                let interval = interval.as_secs_f64();
                let cap = cap.max(rate);
                let per = rate * interval / std::f64::consts::LN_2;
                let until_cap = interval * (cap / rate).log2();
                if t <= until_cap {
                    per * ((t / interval).exp2() - 1.0)
                } else {
                    per * (cap / rate - 1.0) + (t - until_cap) * cap
                }
            }
            Growth::Step { after, to } => {
                let after = after.as_secs_f64();
                if t <= after {
                    t * rate
                } else {
                    after * rate + (t - after) * to.max(rate)
                }
            }
        }
    }

    /// Seconds from `first` to the release of `position` (fractional places allowed).
    fn offset(&self, position: f64) -> f64 {
        if position <= 0.0 || self.rate.is_infinite() {
            return 0.0;
        }
        let rate = self.rate.max(f64::MIN_POSITIVE);
        match self.growth {
            Growth::None => position / rate,
            Growth::Doubling { interval, cap } => {
                // The rate at `t` is `rate * 2^(t / interval)`, so `t` seconds release
                // `rate * interval / ln 2 * (2^(t / interval) - 1)` requests, until the cap.
                let interval = interval.as_secs_f64();
                let cap = cap.max(rate);
                let per = rate * interval / std::f64::consts::LN_2;
                let until_cap = interval * (cap / rate).log2();
                let released_by_cap = per * (cap / rate - 1.0);
                if position <= released_by_cap {
                    interval * (1.0 + position / per).log2()
                } else {
                    until_cap + (position - released_by_cap) / cap
                }
            }
            Growth::Step { after, to } => {
                let after = after.as_secs_f64();
                let before = rate * after;
                if position <= before {
                    position / rate
                } else {
                    after + (position - before) / to.max(rate)
                }
            }
        }
    }

    /// The time between the release of `position` and the next one.
    pub(crate) fn gap_at(&self, position: f64) -> Duration {
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
            growth: Growth::Doubling {
                interval: 100 * MS,
                cap,
            },
        }
    }

    #[test]
    fn nothing_is_released_before_the_first_release() {
        let now = Instant::now();
        let schedule = slow_start(now, f64::INFINITY);
        assert_eq!(schedule.release_at(0.0), now + 300 * MS);
        assert!(schedule.release_at(1.0) > now + 300 * MS);
    }

    #[test]
    fn a_constant_rate_releases_one_place_per_gap() {
        let now = Instant::now();
        let schedule = Schedule {
            first: now,
            rate: 100.0,
            growth: Growth::None,
        };
        assert_eq!(schedule.release_at(50.0), now + 500 * MS);
        assert_eq!(schedule.gap_at(7.0), 10 * MS);
    }

    #[test]
    fn slow_start_releases_what_doubling_every_interval_releases() {
        let now = Instant::now();
        let schedule = slow_start(now, f64::INFINITY);
        // 2/s doubling every 100 ms: ten intervals reach 2,048/s, having released about
        // 2 * 0.1 / ln 2 * (2^10 - 1) = 295 requests.
        let tenth = schedule.release_at(295.0) - schedule.first;
        assert!((990 * MS..=1010 * MS).contains(&tenth), "{tenth:?}");
        assert!(
            schedule.gap_at(295.0) < schedule.gap_at(10.0),
            "the gaps shrink"
        );
    }

    #[test]
    fn a_known_rate_caps_the_slow_start_and_the_rest_goes_at_it() {
        let now = Instant::now();
        let schedule = slow_start(now, 1000.0);
        let capped = schedule.gap_at(10_000.0);
        assert!(
            (capped.as_secs_f64() - 0.001).abs() < 1e-9,
            "{capped:?} at the cap of 1,000/s"
        );
        let later = schedule.release_at(10_000.0) - schedule.release_at(9_000.0);
        assert!((999 * MS..=1001 * MS).contains(&later), "{later:?}");
    }

    #[test]
    fn the_release_of_a_later_place_is_never_earlier() {
        let now = Instant::now();
        for schedule in [slow_start(now, f64::INFINITY), slow_start(now, 50.0)] {
            let mut previous = schedule.release_at(0.0);
            for position in 1..5_000 {
                let at = schedule.release_at(position as f64);
                assert!(at >= previous, "{position}");
                previous = at;
            }
        }
    }

    #[test]
    fn a_regain_releases_at_the_cut_rate_then_at_the_rate_regained() {
        let now = Instant::now();
        let schedule = Schedule {
            first: now,
            rate: 700.0,
            growth: Growth::Step {
                after: 500 * MS,
                to: 1000.0,
            },
        };
        assert_eq!(schedule.release_at(350.0), now + 500 * MS);
        assert_eq!(schedule.release_at(1350.0), now + 1500 * MS);
    }

    #[test]
    fn released_by_is_the_inverse_of_release_at() {
        let now = Instant::now();
        let regain = Schedule {
            first: now,
            rate: 700.0,
            growth: Growth::Step {
                after: 500 * MS,
                to: 1000.0,
            },
        };
        for schedule in [
            slow_start(now, f64::INFINITY),
            slow_start(now, 50.0),
            regain,
        ] {
            for position in [0.0, 1.0, 10.0, 300.0, 5_000.0] {
                let back = schedule.released_by(schedule.release_at(position));
                assert!(
                    (back - position).abs() < 1e-3 * position.max(1.0),
                    "{position}: {back}"
                );
            }
            assert_eq!(
                schedule.released_by(now),
                0.0,
                "nothing before the first release"
            );
        }
    }

    #[test]
    fn an_open_endpoint_releases_every_place_at_once() {
        let now = Instant::now();
        let schedule = Schedule::now(now);
        assert_eq!(schedule.release_at(1_000_000.0), now);
        assert_eq!(schedule.gap_at(3.0), Duration::ZERO);
    }

    #[test]
    fn a_rate_near_zero_predicts_a_long_wait_without_panicking() {
        let now = Instant::now();
        let schedule = Schedule {
            first: now,
            rate: 1e-300,
            growth: Growth::None,
        };
        assert!(schedule.release_at(f64::MAX) > now + Duration::from_secs(1_000_000));
    }
}
