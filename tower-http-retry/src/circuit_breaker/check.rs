//! A configuration check across the two layers: does the breaker trip before the retries it
//! guards have run their course, and does it half-open within the time a caller waits?

use super::config::Config;
use super::window::BUCKETS;
use crate::retry::RetryLayer;
use std::fmt;
use std::time::Duration;

/// The breaker cannot trip on the failures of a single request's retry sequence.
///
/// Returned by [`CircuitBreakerLayer::check_retry`](crate::CircuitBreakerLayer::check_retry). Under concurrent traffic the breaker still
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

/// The circuit stays open longer than the retry layer's deadline.
///
/// The open duration is the shortest outage every caller sees once the breaker trips: each
/// request in that time fails at once, whatever its own deadline. A caller that gives up after
/// its deadline has said it would rather fail than wait that long, so an open period past it
/// turns a short blip into a lockout longer than any caller waits. Returned (inside
/// [`RetryMismatch`]) by [`CircuitBreakerLayer::check_retry`](crate::CircuitBreakerLayer::check_retry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenPastDeadline {
    longest_open: Duration,
    deadline: Duration,
}

impl OpenPastDeadline {
    /// The longest the circuit stays open after its first trip: the open duration with its
    /// whole jitter.
    pub fn longest_open(&self) -> Duration {
        self.longest_open
    }

    /// The retry layer's deadline.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }
}

impl fmt::Display for OpenPastDeadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the circuit breaker stays open up to {:?} after a trip, longer than the retry \
             layer's deadline ({:?}): every caller in that time fails; set open_duration so that \
             open_duration * (1 + open_jitter) is at most the deadline (or use \
             CircuitBreakerLayer::interactive())",
            self.longest_open, self.deadline
        )
    }
}

impl std::error::Error for OpenPastDeadline {}

/// What [`CircuitBreakerLayer::check_retry`](crate::CircuitBreakerLayer::check_retry) found wrong with a breaker and the retry layer
/// above it (the first problem found).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryMismatch {
    /// One request's retries cannot trip the breaker.
    SlowTrip(SlowTrip),
    /// The circuit stays open longer than the retry layer's deadline.
    OpenPastDeadline(OpenPastDeadline),
}

impl fmt::Display for RetryMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryMismatch::SlowTrip(slow) => slow.fmt(f),
            RetryMismatch::OpenPastDeadline(long) => long.fmt(f),
        }
    }
}

impl std::error::Error for RetryMismatch {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RetryMismatch::SlowTrip(slow) => Some(slow),
            RetryMismatch::OpenPastDeadline(long) => Some(long),
        }
    }
}

/// [`CircuitBreakerLayer::check_retry`](crate::CircuitBreakerLayer::check_retry) for any breaker configuration.
pub(crate) fn check_retry<R>(config: &Config, retry: &RetryLayer<R>) -> Result<(), RetryMismatch> {
    trips_in_time(config, retry).map_err(RetryMismatch::SlowTrip)?;
    half_opens_in_time(config, retry).map_err(RetryMismatch::OpenPastDeadline)
}

/// The circuit half-opens within the retry layer's deadline after its first trip.
fn half_opens_in_time<R>(config: &Config, retry: &RetryLayer<R>) -> Result<(), OpenPastDeadline> {
    let Some(deadline) = retry.deadline() else {
        return Ok(());
    };
    let base = config.open.base();
    let longest_open = base.saturating_add(base.mul_f64(config.open_jitter));
    if longest_open <= deadline {
        return Ok(());
    }
    Err(OpenPastDeadline {
        longest_open,
        deadline,
    })
}

/// One request's retry sequence can trip the breaker.
fn trips_in_time<R>(config: &Config, retry: &RetryLayer<R>) -> Result<(), SlowTrip> {
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
    use crate::circuit_breaker::CircuitBreakerLayer;
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
        let Err(RetryMismatch::SlowTrip(slow)) = by_ratio(5, 60 * SEC).check_retry(&retry()) else {
            panic!("not reported")
        };
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

    fn within(deadline: Duration) -> RetryLayer {
        RetryLayer::builder().deadline(deadline).build().unwrap()
    }

    fn open_for(base: Duration, jitter: f64) -> CircuitBreakerLayer {
        CircuitBreakerLayer::builder()
            .consecutive_failures(3)
            .open_duration(base)
            .open_jitter(jitter)
            .build()
            .unwrap()
    }

    #[test]
    fn an_open_period_past_the_deadline_is_reported_jitter_included() {
        let Err(RetryMismatch::OpenPastDeadline(long)) =
            open_for(4 * SEC, 0.5).check_retry(&within(5 * SEC))
        else {
            panic!("not reported")
        };
        assert_eq!((long.longest_open(), long.deadline()), (6 * SEC, 5 * SEC));
        assert!(long.to_string().contains("open_duration"), "{long}");
        assert_eq!(
            open_for(4 * SEC, 0.25).check_retry(&within(5 * SEC)),
            Ok(())
        );
    }

    #[test]
    fn without_a_deadline_any_open_duration_passes() {
        assert_eq!(
            open_for(60 * SEC, 1.0).check_retry(&RetryLayer::new()),
            Ok(())
        );
    }
}
