//! [`GrpcThrottle`]: the service config's `retryThrottling` (A6) as a retry budget.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use tower_http_retry::retry::RetryBudget;
use tower_http_retry::InvalidConfig;

/// Thousandths of a token: A6 gives `tokenRatio` three decimals.
const MILLI: u64 = 1000;

/// gRPC's retry throttling (proposal A6, the service config's `retryThrottling`) as a
/// [`RetryBudget`].
///
/// A6's rule: the count starts at `max_tokens`; every failed attempt takes one token, every
/// success gives back `token_ratio`, and a retry is allowed only while the count is above
/// `max_tokens / 2`. It is shared by every clone of the layer, as A6 shares it per channel.
///
/// How it maps onto the retry layer, and where it differs from grpc-go and grpc-java:
/// * the layer asks the budget only when it is about to retry, so a failure is counted when it
///   would be retried: the last attempt of a request that ran out of attempts, a failure the
///   server asked not to retry, and a non-retryable status take no token (grpc-go counts
///   every failure with a retryable code, the last attempt's included);
/// * a success is any call that the classifier did not find failing, a committed stream
///   included (its status arrives later, in the trailers, which the layer does not see);
/// * a retry that was allowed and then not sent (its sleep was aborted) gives nothing back: the
///   failure happened.
///
/// [`TokenBucket`](tower_http_retry::retry::TokenBucket) cannot express it: it refuses a retry only when empty
/// (not at half), and a refused retry costs it nothing, so it recovers at once.
///
/// ```
/// use tower_http_retry_grpc::GrpcThrottle;
/// use tower_http_retry::retry::RetryBudget;
///
/// let throttle = GrpcThrottle::new(4.0, 0.5).unwrap();
/// assert!(throttle.withdraw()); // 4 -> 3, above 2
/// assert!(!throttle.withdraw()); // 3 -> 2, not above 2: throttled
/// throttle.deposit();
/// throttle.deposit();
/// throttle.deposit(); // 2 -> 3.5
/// assert!(throttle.withdraw()); // 3.5 -> 2.5
/// ```
pub struct GrpcThrottle {
    /// Thousandths of a token, in `[0, max]`.
    tokens: AtomicU64,
    max: u64,
    ratio: u64,
}

impl GrpcThrottle {
    /// A6's `retryThrottling { maxTokens, tokenRatio }`: `max_tokens` in `(0, 1000]`,
    /// `token_ratio` above 0 (digits past the third decimal ignored, as A6 says).
    pub fn new(max_tokens: f64, token_ratio: f64) -> Result<Self, InvalidConfig> {
        if max_tokens.is_nan() || max_tokens <= 0.0 {
            return Err(InvalidConfig::new(
                "retryThrottling.maxTokens",
                "must be above 0",
            ));
        }
        InvalidConfig::ensure_in_range("retryThrottling.maxTokens", max_tokens, 0.0, 1000.0)?;
        if !token_ratio.is_finite() || token_ratio <= 0.0 {
            return Err(InvalidConfig::new(
                "retryThrottling.tokenRatio",
                "must be above 0",
            ));
        }
        let max = (max_tokens * MILLI as f64).round() as u64;
        // At most 1000 tokens' worth matters: a larger ratio fills the bucket at once.
        let ratio = thousandths(token_ratio.min(1000.0)).max(1);
        Ok(Self {
            tokens: AtomicU64::new(max),
            max,
            ratio,
        })
    }

    /// Tokens available now.
    pub fn available(&self) -> f64 {
        self.tokens.load(Ordering::Acquire) as f64 / MILLI as f64
    }

    /// The most tokens, `maxTokens`.
    pub fn max_tokens(&self) -> f64 {
        self.max as f64 / MILLI as f64
    }

    /// What a success gives back, `tokenRatio`.
    pub fn token_ratio(&self) -> f64 {
        self.ratio as f64 / MILLI as f64
    }
}

/// `value` in thousandths, the digits past the third decimal dropped as A6 says (0.5466 is
/// 0.546), except that a product a float step short of a whole number (0.29 × 1000 may be
/// 289.99…) is that number.
fn thousandths(value: f64) -> u64 {
    let scaled = value * MILLI as f64;
    let nearest = scaled.round();
    (if (scaled - nearest).abs() < 1e-6 {
        nearest
    } else {
        scaled.floor()
    }) as u64
}

impl RetryBudget for GrpcThrottle {
    fn deposit(&self) {
        if self.tokens.load(Ordering::Relaxed) >= self.max {
            // The success path of every call: a full count is not written again.
            return;
        }
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
                Some(tokens.saturating_add(self.ratio).min(self.max))
            });
    }

    fn withdraw(&self) -> bool {
        let before = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
                Some(tokens.saturating_sub(MILLI))
            })
            .unwrap_or_else(|tokens| tokens);
        // Compared doubled, so that an odd `max` in thousandths has an exact half.
        before.saturating_sub(MILLI) * 2 > self.max
    }
}

impl fmt::Debug for GrpcThrottle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcThrottle")
            .field("available", &self.available())
            .field("max_tokens", &self.max_tokens())
            .field("token_ratio", &self.token_ratio())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_stop_at_half_and_successes_bring_them_back() {
        let throttle = GrpcThrottle::new(10.0, 0.1).unwrap();
        let allowed = (0..10).filter(|_| throttle.withdraw()).count();
        // 10 -> 9, 8, 7, 6 allowed (above 5); 5 and below not.
        assert_eq!(allowed, 4);
        assert_eq!(throttle.available(), 0.0);
        for _ in 0..60 {
            throttle.deposit();
        }
        // 6 tokens: one failure leaves 5, not above half.
        assert!(!throttle.withdraw());
        for _ in 0..20 {
            throttle.deposit();
        }
        assert!(throttle.withdraw()); // 7 -> 6
    }

    #[test]
    fn the_count_stays_between_zero_and_max() {
        let throttle = GrpcThrottle::new(3.0, 2.5).unwrap();
        throttle.deposit();
        assert_eq!(throttle.available(), 3.0);
        for _ in 0..10 {
            throttle.withdraw();
        }
        assert_eq!(throttle.available(), 0.0);
    }

    #[test]
    fn the_ratio_keeps_three_decimals() {
        for (ratio, kept) in [(0.5466, 0.546), (0.1, 0.1), (0.29, 0.29), (0.0019, 0.001)] {
            assert_eq!(
                GrpcThrottle::new(10.0, ratio).unwrap().token_ratio(),
                kept,
                "{ratio}"
            );
        }
    }

    #[test]
    fn bad_values_are_refused() {
        for (max, ratio, field) in [
            (0.0, 1.0, "retryThrottling.maxTokens"),
            (1001.0, 1.0, "retryThrottling.maxTokens"),
            (f64::NAN, 1.0, "retryThrottling.maxTokens"),
            (10.0, 0.0, "retryThrottling.tokenRatio"),
            (10.0, -1.0, "retryThrottling.tokenRatio"),
            (10.0, f64::INFINITY, "retryThrottling.tokenRatio"),
        ] {
            assert_eq!(GrpcThrottle::new(max, ratio).unwrap_err().field(), field);
        }
    }
}
