//! Backoff delays: plain exponential and three jitter distributions (the formulas are on
//! [`Backoff`]). Every policy is a pure function of the retry number, the previous delay and a
//! random stream, so it is tested without a runtime.

use crate::error::{duration_at_most_max, in_range, non_zero, not_below, InvalidConfig};
use crate::random::uniform;
use rand::Rng;
use std::time::Duration;

/// How the delay before a retry is drawn. The formulas are in the table on [`Backoff`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Jitter {
    /// Plain exponential backoff, no randomness: `min(cap, base * m^n)`.
    ///
    /// Clients that failed together retry together; use only when there is a single client.
    None,
    /// Full jitter: `U(0, min(cap, base * m^n))`. The best spread of load; the default.
    Full,
    /// Equal jitter: `v/2 + U(0, v/2)`. Never retries sooner than half the exponential delay.
    Equal,
    /// Decorrelated jitter: `min(cap, U(base, 3 * prev))`. Each delay grows from the last one
    /// drawn rather than from the retry number.
    Decorrelated,
}

/// A backoff policy: the [`Jitter`] distribution and its bounds.
///
/// With `n` the retry number (0 for the first retry) and `v = min(cap, base * multiplier^n)`:
///
/// | [`Jitter`] | delay before retry `n` |
/// |---|---|
/// | [`None`](Jitter::None) | `v` |
/// | [`Full`](Jitter::Full) | `U(0, v)` |
/// | [`Equal`](Jitter::Equal) | `v/2 + U(0, v/2)` |
/// | [`Decorrelated`](Jitter::Decorrelated) | `min(cap, U(base, 3 * prev))`, `prev` starting at `base` |
///
/// (Marc Brooker, "Exponential Backoff And Jitter", AWS Architecture Blog, 2015.) The maths
/// saturates: `base * multiplier^n` is computed in floating point and becomes infinite rather than
/// overflowing, so every policy returns a delay in `[0, cap]` for every `n` up to `u32::MAX`.
///
/// `Backoff` is plain data; [`validate`](Backoff::validate) (called by
/// [`RetryLayerBuilder::build`](crate::retry::RetryLayerBuilder::build)) rejects values that cannot
/// work.
///
/// ```
/// use std::time::Duration;
/// use tower_http_retry::{Backoff, Jitter};
///
/// let backoff = Backoff::new(Jitter::None, Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(backoff.ceiling(0), Duration::from_millis(100));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(800));
/// assert_eq!(backoff.ceiling(4), Duration::from_secs(1)); // capped
/// assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(1)); // saturates, never overflows
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    jitter: Jitter,
    base: Duration,
    cap: Duration,
    multiplier: f64,
}

impl Backoff {
    /// A backoff with the given distribution, base and cap, and a multiplier of 2.
    pub const fn new(jitter: Jitter, base: Duration, cap: Duration) -> Self {
        Self {
            jitter,
            base,
            cap,
            multiplier: 2.0,
        }
    }

    /// Sets the growth factor `m` of `base * m^n` (at least 1; ignored by
    /// [`Jitter::Decorrelated`], whose growth factor is 3).
    pub const fn multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier;
        self
    }

    /// The distribution.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The smallest exponential step, `base`.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The largest delay any retry may get, `cap`.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// Checks the bounds: `0 < base <= cap <= InvalidConfig::MAX_DURATION` and `1 <= multiplier <
    /// inf`.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        non_zero("backoff.base", self.base)?;
        not_below("backoff.cap", self.cap, "backoff.base", self.base)?;
        duration_at_most_max("backoff.cap", self.cap)?;
        in_range("backoff.multiplier", self.multiplier, 1.0, f64::MAX)
    }

    /// The exponential bound `v = min(cap, base * m^n)` for retry `n` (0 for the first retry).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let grown = self.base.as_secs_f64() * self.multiplier.powf(f64::from(retry));
        seconds_capped(grown, self.cap)
    }

    /// Draws the delay before retry `n` (0 for the first retry).
    ///
    /// `previous` is the delay slept before the previous retry, or `base` before the first one;
    /// only [`Jitter::Decorrelated`] reads it. The result is always in `[0, cap]`.
    pub fn delay<R: Rng + ?Sized>(&self, retry: u32, previous: Duration, rng: &mut R) -> Duration {
        match self.jitter {
            Jitter::None => self.ceiling(retry),
            Jitter::Full => uniform(Duration::ZERO, self.ceiling(retry), rng),
            Jitter::Equal => {
                let half = self.ceiling(retry) / 2;
                half + uniform(Duration::ZERO, half, rng)
            }
            Jitter::Decorrelated => {
                let upper = seconds_capped(previous.as_secs_f64() * 3.0, self.cap).max(self.base);
                uniform(self.base, upper, rng).min(self.cap)
            }
        }
    }
}

impl Default for Backoff {
    /// Full jitter, base 100 ms, cap 10 s, multiplier 2.
    fn default() -> Self {
        Self::new(
            Jitter::Full,
            Duration::from_millis(100),
            Duration::from_secs(10),
        )
    }
}

/// `min(cap, seconds)` as a `Duration`, treating NaN and infinity as "above the cap".
fn seconds_capped(seconds: f64, cap: Duration) -> Duration {
    if seconds.is_finite() && seconds < cap.as_secs_f64() {
        Duration::from_secs_f64(seconds.max(0.0)).min(cap)
    } else {
        cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{rngs::SmallRng, SeedableRng};

    const MS: Duration = Duration::from_millis(1);

    fn policy(jitter: Jitter) -> Backoff {
        Backoff::new(jitter, 100 * MS, 10_000 * MS)
    }

    #[test]
    fn plain_exponential_doubles_then_caps() {
        let backoff = policy(Jitter::None);
        let mut rng = SmallRng::seed_from_u64(1);
        let delays: Vec<_> = (0..9).map(|n| backoff.delay(n, MS, &mut rng)).collect();
        let expected: Vec<_> = [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
            .iter()
            .map(|ms| *ms * MS)
            .collect();
        assert_eq!(delays, expected);
    }

    #[test]
    fn multiplier_changes_the_growth() {
        let backoff = policy(Jitter::None).multiplier(3.0);
        assert_eq!(backoff.ceiling(2), 900 * MS);
    }

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling() {
        let backoff = policy(Jitter::Full);
        let mut rng = SmallRng::seed_from_u64(7);
        let draws: Vec<_> = (0..2000).map(|_| backoff.delay(3, MS, &mut rng)).collect();
        assert!(draws.iter().all(|d| *d <= 800 * MS));
        // Both halves of the range are hit: the draw is spread, not pinned to a value.
        assert!(draws.iter().any(|d| *d < 100 * MS));
        assert!(draws.iter().any(|d| *d > 700 * MS));
        let mean = draws.iter().sum::<Duration>() / 2000;
        assert!(mean > 350 * MS && mean < 450 * MS, "mean {mean:?}");
    }

    #[test]
    fn equal_jitter_never_goes_below_half() {
        let backoff = policy(Jitter::Equal);
        let mut rng = SmallRng::seed_from_u64(7);
        let draws: Vec<_> = (0..2000).map(|_| backoff.delay(3, MS, &mut rng)).collect();
        assert!(draws.iter().all(|d| *d >= 400 * MS && *d <= 800 * MS));
        assert!(draws.iter().any(|d| *d < 450 * MS));
        assert!(draws.iter().any(|d| *d > 750 * MS));
    }

    #[test]
    fn decorrelated_grows_from_the_previous_delay() {
        let backoff = policy(Jitter::Decorrelated);
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..2000 {
            let d = backoff.delay(0, 1000 * MS, &mut rng);
            assert!(d >= 100 * MS && d <= 3000 * MS, "{d:?}");
        }
        // The retry number does not matter, only `previous`.
        let d = backoff.delay(40, 100 * MS, &mut rng);
        assert!(d >= 100 * MS && d <= 300 * MS, "{d:?}");
    }

    #[test]
    fn decorrelated_after_a_short_hint_stays_at_base_or_more() {
        let backoff = policy(Jitter::Decorrelated);
        let mut rng = SmallRng::seed_from_u64(7);
        assert_eq!(backoff.delay(0, Duration::ZERO, &mut rng), 100 * MS);
    }

    #[test]
    fn validation_names_the_field() {
        let zero_base = Backoff::new(Jitter::Full, Duration::ZERO, MS);
        assert_eq!(zero_base.validate().unwrap_err().field(), "backoff.base");
        let inverted = Backoff::new(Jitter::Full, 2 * MS, MS);
        assert_eq!(inverted.validate().unwrap_err().field(), "backoff.cap");
        let huge = Backoff::new(Jitter::Full, MS, Duration::MAX);
        assert_eq!(huge.validate().unwrap_err().field(), "backoff.cap");
        for m in [0.5, f64::NAN, f64::INFINITY, -2.0] {
            let bad = policy(Jitter::Full).multiplier(m);
            assert_eq!(bad.validate().unwrap_err().field(), "backoff.multiplier");
        }
        assert!(Backoff::default().validate().is_ok());
    }

    fn any_jitter() -> impl Strategy<Value = Jitter> {
        prop_oneof![
            Just(Jitter::None),
            Just(Jitter::Full),
            Just(Jitter::Equal),
            Just(Jitter::Decorrelated)
        ]
    }

    proptest! {
        #[test]
        fn every_delay_is_within_zero_and_cap(
            jitter in any_jitter(),
            base_ns in 1u64..=1_000_000_000_000,
            extra_ns in 0u64..=1_000_000_000_000,
            multiplier in 1.0f64..1000.0,
            retry in any::<u32>(),
            previous_ns in any::<u64>(),
            seed in any::<u64>(),
        ) {
            let base = Duration::from_nanos(base_ns);
            let cap = base + Duration::from_nanos(extra_ns);
            let backoff = Backoff::new(jitter, base, cap).multiplier(multiplier);
            prop_assert!(backoff.validate().is_ok());
            let mut rng = SmallRng::seed_from_u64(seed);
            let delay = backoff.delay(retry, Duration::from_nanos(previous_ns), &mut rng);
            prop_assert!(delay <= cap, "{:?} > cap {:?}", delay, cap);
            let ceiling = backoff.ceiling(retry);
            prop_assert!(ceiling <= cap && ceiling >= base.min(cap));
            match jitter {
                Jitter::None => prop_assert_eq!(delay, ceiling),
                Jitter::Full => prop_assert!(delay <= ceiling),
                Jitter::Equal => prop_assert!(delay >= ceiling / 2 && delay <= ceiling),
                Jitter::Decorrelated => prop_assert!(delay >= base),
            }
        }

        #[test]
        fn ceiling_never_decreases(
            base_ms in 1u64..10_000,
            retry in 0u32..200,
            multiplier in 1.0f64..10.0,
        ) {
            let backoff = Backoff::new(Jitter::None, Duration::from_millis(base_ms), Duration::from_secs(3600))
                .multiplier(multiplier);
            prop_assert!(backoff.ceiling(retry) <= backoff.ceiling(retry + 1));
        }
    }
}
