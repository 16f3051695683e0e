//! The rate-limit headers APIs send instead of (or besides) `Retry-After`: `retry-after-ms`,
//! the IETF `RateLimit` / `RateLimit-Policy` fields (draft 8 on, and draft-07's dictionary), the
//! older drafts' `RateLimit-Reset` / `RateLimit-Remaining`, and the `X-RateLimit-*` family, each
//! read into "is the quota used up, and when does it reset".

use super::structured::{parse_dictionary, parse_list, Bare, Item};
use super::{decimal, trim_ows};
use http::header::{HeaderMap, HeaderName};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What one rate-limit header said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Not there (or there, but about a quota that is not used up).
    Absent,
    /// There, but unreadable.
    Malformed,
    /// A reset time; `exhausted` when the header itself says nothing is left.
    Reset {
        after: Option<Duration>,
        exhausted: bool,
    },
}

/// `retry-after-ms`: a non-negative integer of milliseconds.
pub(crate) fn retry_after_ms(headers: &HeaderMap) -> Reading {
    let Some(value) = headers.get(&RETRY_AFTER_MS) else {
        return Reading::Absent;
    };
    match decimal(trim_ows(value.as_bytes())) {
        Some(ms) => Reading::Reset {
            after: Some(Duration::from_millis(ms)),
            exhausted: false,
        },
        None => Reading::Malformed,
    }
}

/// The IETF `RateLimit` field (draft-ietf-httpapi-ratelimit-headers), in either of its shapes.
///
/// From draft 8 on, a List of policies, each with `r` (remaining) and `t` (seconds until the
/// reset). A policy with `r=0` is used up; the wait is the largest `t` among the used-up ones. A
/// used-up policy without `t` waits the window (`w`) its `RateLimit-Policy` entry of the same
/// name declares, if any.
///
/// Draft-07 (express-rate-limit's `draft-7`), one Dictionary: `limit=100, remaining=0, reset=2`,
/// `reset` in seconds from now. The two shapes cannot be mistaken for each other: `key=value` at
/// the top level is not valid List syntax, and a List member is tried as a policy first.
pub(crate) fn ietf(headers: &HeaderMap) -> Reading {
    let values = headers.get_all(&RATELIMIT);
    if values.iter().next().is_none() {
        return Reading::Absent;
    }
    let lines = || values.iter().map(|value| value.as_bytes());
    let Some(policies) = parse_list(lines()) else {
        return match parse_dictionary(lines()) {
            Some(members) => draft_07(&members),
            None => Reading::Malformed,
        };
    };
    let mut exhausted = false;
    let mut after: Option<Duration> = None;
    for policy in &policies {
        let Bare::Text(name) = &policy.bare else {
            return Reading::Malformed;
        };
        let Some(remaining) = policy.non_negative("r") else {
            return Reading::Malformed;
        };
        if policy.param("t").is_some() && policy.non_negative("t").is_none() {
            return Reading::Malformed;
        }
        if remaining > 0 {
            continue;
        }
        exhausted = true;
        let reset = policy
            .non_negative("t")
            .or_else(|| declared_window(headers, name));
        if let Some(seconds) = reset {
            let reset = Duration::from_secs(seconds);
            after = Some(after.map_or(reset, |longest| longest.max(reset)));
        }
    }
    if exhausted {
        Reading::Reset { after, exhausted }
    } else {
        Reading::Absent
    }
}

/// Draft-07's dictionary: `remaining` (required) and `reset` (seconds from now), both
/// non-negative Integers; `limit` and unknown keys are not needed to decide.
fn draft_07(members: &[(String, Item)]) -> Reading {
    let member = |key: &str| {
        members
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, item)| match item.bare {
                Bare::Integer(n) => u64::try_from(n).ok(),
                _ => None,
            })
    };
    let Some(Some(remaining)) = member("remaining") else {
        return Reading::Malformed;
    };
    let after = match member("reset") {
        Some(Some(seconds)) => Some(Duration::from_secs(seconds)),
        Some(None) => return Reading::Malformed,
        None => None,
    };
    if remaining > 0 {
        return Reading::Absent;
    }
    Reading::Reset {
        after,
        exhausted: true,
    }
}

/// The window `w` (seconds) that `RateLimit-Policy` declares for policy `name`, if readable.
fn declared_window(headers: &HeaderMap, name: &str) -> Option<u64> {
    let values = headers.get_all(&RATELIMIT_POLICY);
    let policies = parse_list(values.iter().map(|value| value.as_bytes()))?;
    policies
        .iter()
        .find(|policy| matches!(&policy.bare, Bare::Text(n) if n == name))
        .and_then(|policy| policy.non_negative("w"))
}

/// How an `X-RateLimit-Reset`-style header writes its reset time: APIs differ, and the header name
/// does not say, so it is declared per header ([`XRateLimit::new`](crate::hint::XRateLimit::new)).
///
/// Every format accepts an integer or a decimal with a fraction (`1700000000.250`). Epoch values
/// are measured against the local clock when it agrees with the response's `Date` header (within
/// the second `Date` is rounded to), so a reset 2.000 s away is waited 2.0 s; against the `Date`
/// when the clocks disagree by more (a client whose clock is off by an hour waits what the server
/// meant, up to 1 s late, never early); against the local clock when there is no valid `Date`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResetFormat {
    /// Unix time in seconds (GitHub, Twitter/X).
    EpochSeconds,
    /// Unix time in milliseconds.
    EpochMillis,
    /// Seconds from now (the older IETF drafts' `RateLimit-Reset`, many gateways).
    DeltaSeconds,
    /// An integer within `window` of now, read as Unix seconds or milliseconds, is an epoch;
    /// any other value is seconds from now. For an API whose format is not documented: a
    /// delta is small and an epoch is near now, so the two do not overlap for any window
    /// shorter than decades.
    Auto {
        /// How far from now an epoch value may be to be taken for one.
        window: Duration,
    },
    /// A duration from now with its units, as Go's `time.Duration` writes it: `1s`, `6m0s`,
    /// `20ms`, `1h2m3.5s` (units `h`, `m`, `s`, `ms`, `us` or `µs`, `ns`; each number may have
    /// a fraction; `0` alone is zero). OpenAI writes its resets so.
    Duration,
}

impl ResetFormat {
    /// [`Auto`](Self::Auto) with a window of one day.
    pub const AUTO: Self = Self::Auto {
        window: Duration::from_secs(24 * 60 * 60),
    };

    /// The wait `raw` means, measured against `now`; `None` when it is not a number.
    fn read(self, raw: &[u8], now: SystemTime) -> Option<Duration> {
        if let Self::Duration = self {
            return go_duration(raw);
        }
        let value = seconds(raw)?;
        let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let until = |epoch: Duration| epoch.saturating_sub(since_epoch);
        Some(match self {
            Self::EpochSeconds => until(value),
            Self::EpochMillis => until(value / 1000),
            Self::DeltaSeconds | Self::Duration => value,
            Self::Auto { window } => {
                let near =
                    |epoch: Duration| epoch.max(since_epoch) - epoch.min(since_epoch) <= window;
                if near(value) {
                    until(value)
                } else if near(value / 1000) {
                    until(value / 1000)
                } else {
                    value
                }
            }
        })
    }
}

/// One `X-RateLimit-Reset`-style header, with the format its API writes it in and the
/// remaining-requests header that says the quota is used up.
///
/// The reset counts as a hint when the remaining count is 0, or when the status itself says
/// the client is limited (429, 503) and there is no remaining count. A remaining count above 0
/// means the reset is about a quota that is not the problem, and is ignored.
///
/// ```
/// use http::HeaderName;
/// use tower_http_retry::hint::{ResetFormat, XRateLimit};
///
/// // An API that writes its reset as seconds from now, under its own names.
/// let acme = XRateLimit::new(HeaderName::from_static("acme-quota-reset"), ResetFormat::DeltaSeconds)
///     .remaining(HeaderName::from_static("acme-quota-left"));
/// # let _ = acme;
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct XRateLimit {
    reset: HeaderName,
    remaining: Option<HeaderName>,
    format: ResetFormat,
}

impl XRateLimit {
    /// The header `reset`, written in `format`, with no remaining-requests header.
    pub fn new(reset: HeaderName, format: ResetFormat) -> Self {
        Self {
            reset,
            remaining: None,
            format,
        }
    }

    /// The header whose value 0 says the quota is used up.
    pub fn remaining(mut self, remaining: HeaderName) -> Self {
        self.remaining = Some(remaining);
        self
    }

    /// GitHub's `x-ratelimit-reset` (Unix seconds) and `x-ratelimit-remaining`.
    pub fn github() -> Self {
        Self::new(X_RATELIMIT_RESET, ResetFormat::EpochSeconds).remaining(X_RATELIMIT_REMAINING)
    }

    /// `x-ratelimit-reset` in [`ResetFormat::AUTO`] and `x-ratelimit-remaining`: the family's
    /// usual names, for an API that does not say which format it writes.
    pub fn auto() -> Self {
        Self::new(X_RATELIMIT_RESET, ResetFormat::AUTO).remaining(X_RATELIMIT_REMAINING)
    }

    /// OpenAI's request quota: `x-ratelimit-reset-requests` ([`ResetFormat::Duration`]:
    /// `1s`) and `x-ratelimit-remaining-requests`.
    pub fn openai_requests() -> Self {
        Self::new(X_RATELIMIT_RESET_REQUESTS, ResetFormat::Duration)
            .remaining(X_RATELIMIT_REMAINING_REQUESTS)
    }

    /// OpenAI's token quota: `x-ratelimit-reset-tokens` ([`ResetFormat::Duration`]: `6m0s`)
    /// and `x-ratelimit-remaining-tokens`.
    pub fn openai_tokens() -> Self {
        Self::new(X_RATELIMIT_RESET_TOKENS, ResetFormat::Duration)
            .remaining(X_RATELIMIT_REMAINING_TOKENS)
    }

    /// `RateLimit-Reset` and `RateLimit-Remaining` of the IETF drafts up to 06 (sent by
    /// express-rate-limit's `draft-6` and many gateways): the reset in seconds from now, read in
    /// [`ResetFormat::AUTO`] so that a server that writes a Unix time there is understood too.
    pub fn ietf_draft_06() -> Self {
        Self::new(RATELIMIT_RESET, ResetFormat::AUTO).remaining(RATELIMIT_REMAINING)
    }

    /// What the headers say, measured against `now` (asked only for a reset value to read);
    /// `limited` when the status says the client is rate-limited.
    pub(crate) fn read(
        &self,
        headers: &HeaderMap,
        now: &mut dyn FnMut() -> SystemTime,
        limited: bool,
    ) -> Reading {
        let remaining = match &self.remaining {
            Some(name) => match headers.get(name) {
                Some(value) => match decimal(trim_ows(value.as_bytes())) {
                    Some(count) => Some(count),
                    None => return Reading::Malformed,
                },
                None => None,
            },
            None => None,
        };
        let exhausted = remaining == Some(0);
        if !(exhausted || (limited && remaining.is_none())) {
            return Reading::Absent;
        }
        let after = match headers.get(&self.reset) {
            Some(value) => match self.format.read(trim_ows(value.as_bytes()), now()) {
                Some(after) => Some(after),
                None => return Reading::Malformed,
            },
            None if exhausted => None,
            None => return Reading::Absent,
        };
        Reading::Reset { after, exhausted }
    }

    /// Whether the remaining-requests header says the quota is used up.
    pub(crate) fn exhausted(&self, headers: &HeaderMap) -> bool {
        self.remaining
            .as_ref()
            .and_then(|name| headers.get(name))
            .and_then(|value| decimal(trim_ows(value.as_bytes())))
            == Some(0)
    }
}

// Named once: a lookup by a `&str` parses the name again on every response.
const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const X_RATELIMIT_RESET_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-reset-requests");
const X_RATELIMIT_REMAINING_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-requests");
const X_RATELIMIT_RESET_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-reset-tokens");
const X_RATELIMIT_REMAINING_TOKENS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-tokens");

/// A Go `time.Duration` string ([`ResetFormat::Duration`]); `None` for anything else (a sign,
/// a unit missing or unknown, nothing).
pub(super) fn go_duration(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?;
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&len| len > 0)?;
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let nanos_per_unit: f64 = match unit {
            "h" => 3_600e9,
            "m" => 60e9,
            "s" => 1e9,
            "ms" => 1e6,
            "us" | "µs" | "μs" => 1e3,
            "ns" => 1.0,
            _ => return None,
        };
        let amount: f64 = number.parse().ok()?;
        total =
            total.checked_add(Duration::try_from_secs_f64(amount * nanos_per_unit / 1e9).ok()?)?;
        rest = after;
    }
    Some(total)
}

/// A non-negative number of seconds, integer or with up to nine decimals.
fn seconds(value: &[u8]) -> Option<Duration> {
    let (whole, fraction) = match value.iter().position(|&byte| byte == b'.') {
        Some(dot) => (&value[..dot], Some(&value[dot + 1..])),
        None => (value, None),
    };
    let whole = decimal(whole)?;
    let nanos = match fraction {
        None => 0,
        Some(digits) if !digits.is_empty() && digits.len() <= 9 => {
            let scale = 10u64.pow(9 - digits.len() as u32);
            decimal(digits)? * scale
        }
        Some(_) => return None,
    };
    Some(Duration::new(whole, nanos as u32))
}
