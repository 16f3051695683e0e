//! A configuration check across the two layers: does the breaker trip before the retries it
//! guards have run their course?

use super::config::Config;
use super::layer::CircuitBreakerLayer;
use super::window::BUCKETS;
use crate::retry::RetryLayer;
use std::fmt;
use std::time::Duration;

/// The breaker cannot trip on the failures of a single request's retry sequence.
///
/// Returned by [`CircuitBreakerLayer::check_retry`]. Under concurrent traffic the breaker still
/// trips sooner, on the failures of many requests together; but a lone request (or a slow trickle)
/// against a dead endpoint then spends its whole retry sequence, sleeps included, before the
/// breaker can help, and every request after it does the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlowTrip {
    failures_to_trip: u32,
    max_attempts: u32,
    retry_sequence: Duration,
}

impl SlowTrip {
    /// The fewest failures after which the breaker can open (consecutive failures, or the
    /// minimum number of calls of the ratio trip, whichever is fewer).
    pub fn failures_to_trip(&self) -> u32 {
        self.failures_to_trip
    }

    /// The retry layer's `max_attempts`.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The longest the retry layer sleeps over one request: the sum of the backoff's ceilings
    /// (`Retry-After` hints can stretch it further).
    pub fn retry_sequence(&self) -> Duration {
        self.retry_sequence
    }
}

impl fmt::Display for SlowTrip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the circuit breaker trips after {} failures, but a request makes at most {} attempts \
             (sleeping up to {:?}): one request's retries cannot trip it; set \
             consecutive_failures to at most {}",
            self.failures_to_trip, self.max_attempts, self.retry_sequence, self.max_attempts
        )
    }
}

impl std::error::Error for SlowTrip {}

impl<C> CircuitBreakerLayer<C> {
    /// Checks that the failures of one request's retry sequence can trip this breaker, so that
    /// an endpoint that is down opens the circuit while requests are still sleeping between
    /// attempts (and the [`AbortSignal`](crate::AbortSignal) wakes them), rather than after they
    /// have all run their course.
    ///
    /// The consecutive-failures trip qualifies when it needs no more failures than
    /// `max_attempts`; the ratio trip when `minimum_calls` attempts fit in `max_attempts` and
    /// their sleeps (taken at the backoff's ceiling) fit in the window.
    ///
    /// ```
    /// use tower_http_retry::{CircuitBreakerLayer, RetryLayer};
    ///
    /// let retry = RetryLayer::builder().max_attempts(3).build().unwrap();
    /// let slow = CircuitBreakerLayer::builder().consecutive_failures(10).build().unwrap();
    /// let warning = slow.check_retry(&retry).unwrap_err();
    /// assert_eq!(warning.failures_to_trip(), 10);
    ///
    /// let fast = CircuitBreakerLayer::builder().consecutive_failures(3).build().unwrap();
    /// assert!(fast.check_retry(&retry).is_ok());
    /// ```
    pub fn check_retry<R>(&self, retry: &RetryLayer<R>) -> Result<(), SlowTrip> {
        check_retry(self.config(), retry)
    }
}

/// [`CircuitBreakerLayer::check_retry`] for any breaker configuration.
pub(crate) fn check_retry<R>(config: &Config, retry: &RetryLayer<R>) -> Result<(), SlowTrip> {
    let attempts = retry.max_attempts();
    // The longest one request sleeps before its n-th attempt.
    let slept_before = |attempt: u32| -> Duration {
        (0..attempt.saturating_sub(1))
            .map(|retry_number| retry.backoff().ceiling(retry_number))
            .fold(Duration::ZERO, Duration::saturating_add)
    };
    let by_count = config.consecutive_failures.filter(|&n| n <= attempts);
    // The window slides in tenths: only 9/10 of it is sure to still hold the first failure.
    let sure_window = config.window / BUCKETS as u32 * (BUCKETS as u32 - 1);
    let by_ratio = config
        .failure_ratio
        .map(|_| config.minimum_calls)
        .filter(|&calls| calls <= attempts && slept_before(calls) < sure_window);
    if by_count.is_some() || by_ratio.is_some() {
        return Ok(());
    }
    let needed = [
        config.consecutive_failures,
        config.failure_ratio.map(|_| config.minimum_calls),
    ];
    Err(SlowTrip {
        failures_to_trip: needed.into_iter().flatten().min().unwrap_or(u32::MAX),
        max_attempts: attempts,
        retry_sequence: slept_before(attempts),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{Backoff, Jitter};

    const SEC: Duration = Duration::from_secs(1);

    /// 4 attempts with sleeps of 1, 2 and 4 s between them.
    fn retry() -> RetryLayer {
        RetryLayer::builder()
            .max_attempts(4)
            .backoff(Backoff::new(Jitter::Full, SEC, 60 * SEC))
            .build()
            .unwrap()
    }

    fn by_ratio(minimum_calls: u32, window: Duration) -> CircuitBreakerLayer {
        CircuitBreakerLayer::builder()
            .without_consecutive_failures()
            .minimum_calls(minimum_calls)
            .window(window)
            .build()
            .unwrap()
    }

    #[test]
    fn a_ratio_trip_within_reach_of_one_sequence_passes() {
        assert_eq!(by_ratio(4, 10 * SEC).check_retry(&retry()), Ok(()));
    }

    #[test]
    fn a_ratio_trip_needing_more_calls_than_attempts_is_reported() {
        let slow = by_ratio(5, 60 * SEC).check_retry(&retry()).unwrap_err();
        assert_eq!(slow.failures_to_trip(), 5);
        assert_eq!(slow.max_attempts(), 4);
        assert_eq!(slow.retry_sequence(), 7 * SEC);
        assert!(slow.to_string().contains("at most 4"), "{slow}");
    }

    #[test]
    fn a_window_shorter_than_the_sleeps_is_reported() {
        // 7 s of sleeps do not fit in 9/10 of a 7 s window.
        assert!(by_ratio(4, 7 * SEC).check_retry(&retry()).is_err());
        assert!(by_ratio(4, 8 * SEC).check_retry(&retry()).is_ok());
    }

    #[test]
    fn either_trip_within_reach_is_enough() {
        let layer = CircuitBreakerLayer::builder()
            .consecutive_failures(4)
            .minimum_calls(100)
            .build()
            .unwrap();
        assert_eq!(layer.check_retry(&retry()), Ok(()));
    }
}
