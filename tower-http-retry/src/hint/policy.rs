//! How a server's "come back in" hint is used: the clamp that keeps a hostile value from parking
//! a request, and the spread that keeps a herd told the same value apart (the user-facing text
//! is on the public item below). Reading the hints is [`crate::hint`]'s job.

use crate::error::{in_range, positive_duration, InvalidConfig};
use crate::random::uniform;
use rand::Rng;
use std::time::Duration;

/// What to do when a `Retry-After` hint is longer than the clamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WhenLonger {
    /// Wait the clamp instead (the default): the retry may come sooner than the server asked.
    /// A hint whose upward spread does not fit under the clamp is spread just below it, so a
    /// herd told the same long hint does not come back in one instant.
    Clamp,
    /// Stop retrying now and return the response, with
    /// [`StopReason::RetryAfterTooLong`](crate::StopReason::RetryAfterTooLong). A hint that fits
    /// under the clamp is never retried sooner than asked: its spread is cut at the clamp.
    GiveUp,
}

/// How `Retry-After` hints are used.
///
///
/// A server that answers 429 or 503 with `Retry-After` knows when it wants to see the client again,
/// so a valid hint replaces the computed backoff delay. It is spread upward by a small random
/// fraction (10 % by default), so that ten thousand clients told "5" come back over half a second
/// rather than in the same millisecond, never sooner than asked. A hint the clamp (by default the
/// backoff cap) cuts is spread just *below* the clamp instead, so a hostile or huge hint can
/// neither park a request nor bring the whole herd back at the clamp in one instant. A hint of 0
/// (or a date in the past) means "now", and is taken at its word.
///
/// ```
/// use std::time::Duration;
/// use tower_http_retry::hint::{HintPolicy, WhenLonger};
///
/// let policy = HintPolicy::honored()
///     .max_delay(Duration::from_secs(60))
///     .when_longer(WhenLonger::GiveUp)
///     .jitter(0.2);
/// assert_eq!(policy.clamp_or(Duration::from_secs(10)), Duration::from_secs(60));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HintPolicy {
    max_delay: Option<Duration>,
    when_longer: WhenLonger,
    jitter: f64,
}

/// The outcome of applying a [`HintPolicy`] to a valid hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    Delay { delay: Duration, clamped: bool },
    GiveUp,
}

impl HintPolicy {
    /// Honour hints, clamped to the backoff cap, with up to 10 % upward jitter (the default).
    pub const fn honored() -> Self {
        Self {
            max_delay: None,
            when_longer: WhenLonger::Clamp,
            jitter: 0.1,
        }
    }

    /// Clamps hints to `max` instead of the backoff cap. Must be greater than zero.
    pub const fn max_delay(mut self, max: Duration) -> Self {
        self.max_delay = Some(max);
        self
    }

    /// Sets what happens to a hint longer than the clamp.
    pub const fn when_longer(mut self, when_longer: WhenLonger) -> Self {
        self.when_longer = when_longer;
        self
    }

    /// Spreads each hint upward by up to `fraction` of itself (0 turns the spread off, at most 1).
    pub const fn jitter(mut self, fraction: f64) -> Self {
        self.jitter = fraction;
        self
    }

    /// The upward spread, as a fraction of a hint.
    pub(crate) fn jitter_fraction(&self) -> f64 {
        self.jitter
    }

    /// The clamp: the configured maximum, or `backoff_cap` when none was set.
    pub fn clamp_or(&self, backoff_cap: Duration) -> Duration {
        self.max_delay.unwrap_or(backoff_cap)
    }

    pub(crate) fn validate(&self) -> Result<(), InvalidConfig> {
        if let Some(max) = self.max_delay {
            positive_duration("hint_policy.max_delay", max)?;
        }
        in_range("hint_policy.jitter", self.jitter, 0.0, 1.0)
    }

    /// Turns a valid hint into the delay to sleep, always within `clamp`.
    ///
    /// A hint whose spread fits under the clamp gives `U(hint, hint * (1 + jitter))`: never
    /// sooner than asked. Otherwise the clamp cuts it, and the delay is spread just below the
    /// clamp, `U(clamp * (1 - jitter), clamp)`, so that clients told the same long hint do not
    /// all come back at the clamp in the same instant.
    ///
    /// `room` is how long the request may still wait (the time left before its deadline): the
    /// upward spread of a hint that fits is cut there, so the client's own jitter does not push
    /// a hint that fits the deadline past it.
    pub(crate) fn resolve<R: Rng + ?Sized>(
        &self,
        hint: Duration,
        clamp: Duration,
        room: Duration,
        rng: &mut R,
    ) -> Resolved {
        if hint <= clamp {
            // `hint <= clamp <= InvalidConfig::MAX_DURATION`, so the spread cannot overflow.
            let spread = hint.mul_f64(self.jitter);
            let fits = hint + spread <= clamp;
            if fits || self.when_longer == WhenLonger::GiveUp {
                // `GiveUp` promises never to come back sooner than asked: the spread is cut at
                // the clamp instead of being moved below it.
                let high = (hint + spread).min(clamp).min(room.max(hint));
                let delay = uniform(hint, high, rng);
                return Resolved::Delay {
                    delay,
                    clamped: false,
                };
            }
        } else if self.when_longer == WhenLonger::GiveUp {
            return Resolved::GiveUp;
        }
        // `mul_f64` goes through floating point and may round above `clamp`.
        let below = clamp.mul_f64(self.jitter).min(clamp);
        let delay = uniform(clamp - below, clamp, rng);
        Resolved::Delay {
            delay,
            clamped: delay < hint,
        }
    }
}

impl Default for HintPolicy {
    fn default() -> Self {
        Self::honored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{rngs::SmallRng, SeedableRng};

    fn delays(policy: HintPolicy, hint: Duration, clamp: Duration) -> Vec<(Duration, bool)> {
        let mut rng = SmallRng::seed_from_u64(1);
        (0..1000)
            .map(
                |_| match policy.resolve(hint, clamp, Duration::MAX, &mut rng) {
                    Resolved::Delay { delay, clamped } => (delay, clamped),
                    Resolved::GiveUp => panic!("gave up"),
                },
            )
            .collect()
    }

    #[test]
    fn hint_longer_than_clamp_is_spread_just_below_the_clamp() {
        let clamp = Duration::from_secs(10);
        let drawn = delays(HintPolicy::honored(), Duration::from_secs(3600), clamp);
        assert!(drawn
            .iter()
            .all(|(d, clamped)| *clamped && *d >= clamp * 9 / 10 && *d <= clamp));
        let distinct: std::collections::HashSet<_> = drawn.iter().map(|(d, _)| d).collect();
        assert!(
            distinct.len() > 900,
            "the herd must not come back in one instant"
        );
    }

    #[test]
    fn full_jitter_below_a_large_clamp_does_not_underflow() {
        // 10^7 s as f64 times 1.0 rounds above the clamp; the spread must still fit under it.
        let clamp = Duration::new(10_000_000, 110_866);
        let drawn = delays(HintPolicy::honored().jitter(1.0), clamp * 2, clamp);
        assert!(drawn.iter().all(|(d, _)| *d <= clamp));
    }

    #[test]
    fn hint_equal_to_the_clamp_is_spread_too() {
        let clamp = Duration::from_secs(10);
        let drawn = delays(HintPolicy::honored(), clamp, clamp);
        let distinct: std::collections::HashSet<_> = drawn.iter().map(|(d, _)| d).collect();
        assert!(distinct.len() > 900);
        assert!(drawn.iter().all(|(d, clamped)| *clamped == (*d < clamp)));
    }

    #[test]
    fn hint_longer_than_clamp_gives_up_when_configured() {
        let mut rng = SmallRng::seed_from_u64(1);
        let give_up = HintPolicy::honored().when_longer(WhenLonger::GiveUp);
        let long = Duration::from_secs(3600);
        let clamp = Duration::from_secs(10);
        assert_eq!(
            give_up.resolve(long, clamp, Duration::MAX, &mut rng),
            Resolved::GiveUp
        );
    }

    #[test]
    fn jitter_spreads_upward_only() {
        let mut rng = SmallRng::seed_from_u64(1);
        let policy = HintPolicy::honored().jitter(0.1);
        let five = Duration::from_secs(5);
        let delays: Vec<_> = (0..1000)
            .map(
                |_| match policy.resolve(five, Duration::from_secs(60), Duration::MAX, &mut rng) {
                    Resolved::Delay { delay, .. } => delay,
                    Resolved::GiveUp => unreachable!(),
                },
            )
            .collect();
        assert!(delays
            .iter()
            .all(|d| *d >= five && *d <= Duration::from_millis(5500)));
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        assert!(
            distinct.len() > 900,
            "only {} distinct delays",
            distinct.len()
        );
    }

    #[test]
    fn validation_names_the_field() {
        let zero = HintPolicy::honored().max_delay(Duration::ZERO);
        assert_eq!(
            zero.validate().unwrap_err().field(),
            "hint_policy.max_delay"
        );
        for bad in [-0.1, 1.5, f64::NAN] {
            let err = HintPolicy::honored().jitter(bad).validate().unwrap_err();
            assert_eq!(err.field(), "hint_policy.jitter");
        }
    }

    proptest! {
        #[test]
        fn resolved_delay_is_within_the_clamp(
            hint_ns in any::<u64>(),
            clamp_ns in 1u64..=u64::MAX,
            jitter in 0.0f64..=1.0,
            seed in any::<u64>(),
        ) {
            let clamp = Duration::from_nanos(clamp_ns);
            let hint = Duration::from_nanos(hint_ns);
            let policy = HintPolicy::honored().jitter(jitter);
            let mut rng = SmallRng::seed_from_u64(seed);
            match policy.resolve(hint, clamp, Duration::MAX, &mut rng) {
                Resolved::Delay { delay, clamped } => {
                    prop_assert!(delay <= clamp);
                    prop_assert!(clamped || delay >= hint);
                }
                Resolved::GiveUp => prop_assert!(false, "clamp policy never gives up"),
            }
        }
    }
}
