//! [`Delay`] and [`DelaySource`]: each wait between attempts and where it came from.

use super::reason::UnknownName;
use std::str::FromStr;
use std::time::Duration;

/// Where a delay came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum DelaySource {
    /// The backoff policy.
    Backoff,
    /// The server's `Retry-After`, within the clamp.
    RetryAfter,
    /// The server's `Retry-After`, cut to the clamp.
    RetryAfterClamped,
    /// The optional random delay before the first attempt.
    FirstAttempt,
    /// A wait in the endpoint's queue while [pacing](crate::Pacing) held it.
    Paced,
    /// A short jittered pause: the server turned the last attempt away unprocessed
    /// ([`NotSent::Refused`](crate::classify::NotSent::Refused): connection rotation), and the
    /// request went again on the next connection.
    Refused,
}

impl DelaySource {
    /// A short `snake_case` name, for logs and metrics labels.
    ///
    /// ```
    /// use tower_http_retry::report::DelaySource;
    ///
    /// assert_eq!(DelaySource::RetryAfterClamped.as_str(), "retry_after_clamped");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            DelaySource::Backoff => "backoff",
            DelaySource::RetryAfter => "retry_after",
            DelaySource::RetryAfterClamped => "retry_after_clamped",
            DelaySource::FirstAttempt => "first_attempt",
            DelaySource::Paced => "paced",
            DelaySource::Refused => "refused",
        }
    }

    /// Every source, in declaration order.
    pub const ALL: [DelaySource; 6] = [
        DelaySource::Backoff,
        DelaySource::RetryAfter,
        DelaySource::RetryAfterClamped,
        DelaySource::FirstAttempt,
        DelaySource::Paced,
        DelaySource::Refused,
    ];
}

/// Reads back the name [`DelaySource::as_str`] gives.
///
/// ```
/// use tower_http_retry::report::DelaySource;
///
/// for source in DelaySource::ALL {
///     assert_eq!(source.as_str().parse::<DelaySource>(), Ok(source));
/// }
/// ```
impl FromStr for DelaySource {
    type Err = UnknownName;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        DelaySource::ALL
            .into_iter()
            .find(|source| source.as_str() == name)
            .ok_or_else(|| UnknownName::new("delay source", name))
    }
}

/// One sleep of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Delay {
    /// The attempt that failed before this sleep (0 for the first-attempt jitter).
    pub after_attempt: u32,
    /// How long the request slept (until the abort, if the sleep was aborted).
    pub duration: Duration,
    /// Where the duration came from.
    pub source: DelaySource,
}
