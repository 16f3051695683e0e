//! The error for a configuration that cannot work.

use std::fmt;

/// A configuration value that cannot work, reported when the layer (or a budget, or a backoff) is
/// built, never at request time.
///
/// The message names the offending field, so `InvalidConfig` is meant to be shown to whoever
/// wrote the configuration.
///
/// ```
/// use std::time::Duration;
/// use tower_http_retry::{Backoff, Jitter, RetryLayer};
///
/// let err = RetryLayer::builder()
///     .backoff(Backoff::new(Jitter::Full, Duration::from_secs(2), Duration::from_secs(1)))
///     .build()
///     .unwrap_err();
/// assert_eq!(err.field(), "backoff.cap");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidConfig {
    field: &'static str,
    message: String,
}

impl InvalidConfig {
    pub(crate) fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }

    /// The configuration field that holds the bad value, e.g. `"backoff.cap"`.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// Why the value cannot work.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid configuration: `{}` {}",
            self.field, self.message
        )
    }
}

impl std::error::Error for InvalidConfig {}

/// Checks that a duration is usable as a bound: not zero where zero makes no sense.
pub(crate) fn non_zero(
    field: &'static str,
    value: std::time::Duration,
) -> Result<(), InvalidConfig> {
    if value.is_zero() {
        Err(InvalidConfig::new(field, "must be greater than zero"))
    } else {
        Ok(())
    }
}

/// Checks that a float is finite and inside `[min, max]`.
pub(crate) fn in_range(
    field: &'static str,
    value: f64,
    min: f64,
    max: f64,
) -> Result<(), InvalidConfig> {
    if value.is_finite() && value >= min && value <= max {
        Ok(())
    } else {
        Err(InvalidConfig::new(
            field,
            format!("must be a finite number in [{min}, {max}], got {value}"),
        ))
    }
}
