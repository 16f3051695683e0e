//! What a response says about retrying it, and how the retry layer uses what it says.
//!
//! * **Reading.** A classifier reads a [`ServerHint`] from each response
//!   ([`Classify::signals`](crate::classify::Classify::signals), [`Signals::hint`](crate::classify::Signals::hint)): when to come back, and whether to
//!   retry at all. [`ServerHints`] lists what [`HttpClassifier`](crate::HttpClassifier) reads:
//!   `Retry-After` ([`parse_retry_after`], [`RetryAfterHint`]), `retry-after-ms`, the IETF
//!   `RateLimit` fields and `x-ratelimit-reset` ([`XRateLimit`], [`ResetFormat`],
//!   [`ResetHeader`]), the stand-down markers (`x-should-retry`, `x-envoy-overloaded`), and a
//!   `google.rpc.RetryInfo` that a body reader put in the response's extensions ([`RetryInfo`]).
//! * **Using.** A [`HintPolicy`] clamps a hint and spreads it, and says what to do with one
//!   longer than the clamp ([`WhenLonger`]); the retry layer takes it with
//!   [`RetryLayerBuilder::hint_policy`](crate::retry::RetryLayerBuilder::hint_policy).
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use tower_http_retry::hint::{HintPolicy, WhenLonger};
//! use tower_http_retry::{HttpClassifier, RetryLayer};
//!
//! let limited = http::Response::builder().status(429).header("retry-after", "30").body(()).unwrap();
//! let hint = HttpClassifier::new().hint(&limited, SystemTime::now());
//! assert_eq!(hint.retry_after(), Some(Duration::from_secs(30)));
//!
//! // Wait up to 10 s for a hint; give up at once on a longer one.
//! let policy = HintPolicy::honored().max_delay(Duration::from_secs(10)).when_longer(WhenLonger::GiveUp);
//! let layer = RetryLayer::builder().hint_policy(policy).build().unwrap();
//! # let _ = layer;
//! ```

mod date;
mod policy;
mod rate_limit;
mod retry_after;
mod retry_info;
mod server_hints;
mod structured;

pub use policy::{HintPolicy, WhenLonger};
pub use rate_limit::{ResetFormat, XRateLimit};
pub use retry_after::{parse_retry_after, RetryAfterHint};
pub use retry_info::RetryInfo;
pub use server_hints::{ResetHeader, ServerHints};

pub(crate) use policy::Resolved;
pub(crate) use retry_info::read_body_hint;

use http::header::{HeaderMap, DATE};

/// A response's mark: its hint (`Retry-After`, a rate-limit reset) was kept for the upstream
/// that sent it by a layer under the retry layer that chooses among upstreams (a
/// [pool](crate::pool)), so the retry layer does not wait for it: the next attempt goes to
/// another upstream. Put in the response's extensions by [`Pool`](crate::pool::Pool), or by a
/// balancer of your own that keeps hints per upstream.
///
/// ```
/// use tower_http_retry::hint::UpstreamHeld;
///
/// let mut response = http::Response::new(());
/// response.extensions_mut().insert(UpstreamHeld::new());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpstreamHeld(());

impl UpstreamHeld {
    /// The mark.
    pub const fn new() -> Self {
        Self(())
    }
}
use std::time::{Duration, SystemTime};

/// What a response says about retrying it, as a classifier reads it
/// ([`Classify::signals`](crate::classify::Classify::signals), [`Signals::hint`](crate::classify::Signals::hint)).
///
/// Four independent parts: the server's word on *whether* to retry, its word on *when*, whether
/// that "when" is the reset of a quota the whole endpoint shares, and whether a hint header was
/// present but unreadable (counted in
/// [`RetryStats::retry_after_malformed`](crate::retry::RetryStats::retry_after_malformed) and
/// otherwise ignored).
///
/// ```
/// use std::time::Duration;
/// use tower_http_retry::hint::ServerHint;
///
/// let hint = ServerHint::after(Duration::from_secs(5));
/// assert_eq!(hint.retry_after(), Some(Duration::from_secs(5)));
/// assert_eq!(hint.should_retry(), None);
/// assert_eq!(ServerHint::stand_down().should_retry(), Some(false));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ServerHint {
    should_retry: Option<bool>,
    after: Option<Duration>,
    quota_reset: bool,
    malformed: bool,
}

impl ServerHint {
    /// The response says nothing about retrying.
    pub const NONE: Self = Self {
        should_retry: None,
        after: None,
        quota_reset: false,
        malformed: false,
    };

    /// Come back after `delay`.
    pub const fn after(delay: Duration) -> Self {
        Self {
            after: Some(delay),
            ..Self::NONE
        }
    }

    /// Do not retry this request (`x-should-retry: false`, `x-envoy-overloaded`, a negative
    /// gRPC pushback).
    pub const fn stand_down() -> Self {
        Self {
            should_retry: Some(false),
            ..Self::NONE
        }
    }

    /// A hint header was there but could not be read.
    pub const fn malformed() -> Self {
        Self {
            malformed: true,
            ..Self::NONE
        }
    }

    /// Sets the server's word on whether to retry: `false` stops retrying (with
    /// [`StopReason::StandDown`](crate::StopReason::StandDown)), `true` allows a retry that the
    /// status or the method alone would not (a 400, a POST without a key).
    pub const fn with_should_retry(mut self, should_retry: Option<bool>) -> Self {
        self.should_retry = should_retry;
        self
    }

    /// Sets when to come back.
    pub const fn with_retry_after(mut self, after: Option<Duration>) -> Self {
        self.after = after;
        self
    }

    /// Marks "when" as the reset of a quota the endpoint shares (see
    /// [`is_quota_reset`](Self::is_quota_reset)).
    pub const fn with_quota_reset(mut self, quota_reset: bool) -> Self {
        self.quota_reset = quota_reset;
        self
    }

    /// Marks a hint header that could not be read.
    pub const fn with_malformed(mut self, malformed: bool) -> Self {
        self.malformed = malformed;
        self
    }

    /// The server's word on whether to retry, if it gave one.
    pub const fn should_retry(&self) -> Option<bool> {
        self.should_retry
    }

    /// When to come back, if the server said so validly.
    pub const fn retry_after(&self) -> Option<Duration> {
        self.after
    }

    /// Whether "when" is the reset of a quota the endpoint shares, not only this request's wait:
    /// a rate-limit header says nothing is left (`RateLimit` with `r=0`,
    /// `X-RateLimit-Remaining: 0`), or a limited response (429, 503) gives its window's reset
    /// (`X-RateLimit-Reset` without a remaining count). With [pacing](crate::Pacing) the whole
    /// endpoint waits for it. A plain `Retry-After` (or `retry-after-ms`, a gRPC pushback) is
    /// not: RFC 9110 (section 10.2.3) makes it how long to wait before a follow-up request, the
    /// request it answers; the pacer takes it as a rate signal while the endpoint still takes
    /// other requests.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use http::{HeaderMap, HeaderValue, StatusCode};
    /// use tower_http_retry::hint::ServerHints;
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("retry-after", HeaderValue::from_static("1"));
    /// let hint = ServerHints::new().read(StatusCode::TOO_MANY_REQUESTS, &headers, SystemTime::now());
    /// assert_eq!(hint.retry_after(), Some(Duration::from_secs(1)));
    /// assert!(!hint.is_quota_reset());
    /// headers.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
    /// let hint = ServerHints::new().read(StatusCode::TOO_MANY_REQUESTS, &headers, SystemTime::now());
    /// assert!(hint.is_quota_reset());
    /// ```
    pub const fn is_quota_reset(&self) -> bool {
        self.quota_reset
    }

    /// Whether a hint header was there but could not be read.
    pub const fn is_malformed(&self) -> bool {
        self.malformed
    }

    /// The hint of a response's `Retry-After` alone, read against `now` (or its `Date`).
    pub fn of_retry_after(headers: &HeaderMap, now: SystemTime) -> Self {
        match parse_retry_after(headers, now) {
            RetryAfterHint::Absent => Self::NONE,
            RetryAfterHint::Delay(delay) => Self::after(delay),
            RetryAfterHint::Malformed => Self::malformed(),
        }
    }
}

/// The time absolute values in `headers` are measured against.
///
/// The local `now` when it agrees with the response's `Date`: `Date` is the server's clock
/// rounded down to the second, so a local clock in `[Date, Date + 1 s]` is consistent with it,
/// and more precise (measured against `Date`, a reset 2.000 s away would wait up to 2.999 s).
/// The `Date` when the two disagree by more, so that a client whose clock is off by an hour
/// neither waits an hour nor not at all (and waits up to 1 s too long rather than too little).
/// The local `now` when there is no valid `Date`.
pub(crate) fn reference_time(headers: &HeaderMap, now: SystemTime) -> SystemTime {
    let Some(date) = headers
        .get(DATE)
        .and_then(|date| date.to_str().ok())
        .and_then(|date| date::parse(date.trim()))
    else {
        return now;
    };
    match now.duration_since(date) {
        Ok(ahead) if ahead <= DATE_RESOLUTION => now,
        _ => date,
    }
}

/// How finely `Date` (an HTTP-date) writes the time: whole seconds.
const DATE_RESOLUTION: Duration = Duration::from_secs(1);

/// A non-negative decimal integer, saturating at `u64::MAX`; `None` for anything else (a sign,
/// a dot, whitespace, nothing).
pub(crate) fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0u64, |acc, digit| {
        acc.saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'))
    }))
}

/// `value` without the optional whitespace (spaces and tabs) around it.
pub(crate) fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}
