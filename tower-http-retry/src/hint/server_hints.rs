//! Which headers [`HttpClassifier`](crate::HttpClassifier) reads for "when" and "whether", and
//! in which order.

use super::rate_limit::{ietf, retry_after_ms, Reading, XRateLimit};
use super::retry_after::{parse_retry_after, RetryAfterHint};
use super::{reference_time, trim_ows, RetryInfo, ServerHint};
use http::header::{HeaderMap, HeaderName};
use http::StatusCode;
use std::time::{Duration, SystemTime};

/// A header that says when to come back, besides `Retry-After`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResetHeader {
    /// `retry-after-ms`: milliseconds (OpenAI, Anthropic and other SDK-facing APIs).
    RetryAfterMs,
    /// The IETF `RateLimit` field (draft-ietf-httpapi-ratelimit-headers), in both shapes it has
    /// had. From draft 8 on, a List of policies with `RateLimit-Policy` for a policy that gives
    /// no reset: a policy with `r=0` is used up, and the wait is the largest `t` among those;
    /// policy names may be Strings or Tokens. Draft-07's single Dictionary,
    /// `limit=100, remaining=0, reset=2`: `remaining=0` is used up, `reset` is seconds from
    /// now. A field that is neither is ignored and counted as malformed. (The drafts up to 06
    /// used separate fields: [`XRateLimit::ietf_draft_06`].)
    RateLimit,
    /// An `X-RateLimit-Reset`-style header with its declared format.
    XRateLimit(XRateLimit),
}

/// What [`HttpClassifier`](crate::HttpClassifier) reads in a response besides its status: when
/// to come back, and whether to retry at all.
///
/// **When.** On a 4xx or 5xx response, a valid `Retry-After` always wins. Otherwise the
/// [`ResetHeader`]s are tried in order and the first that gives a reset time is the hint. Every
/// hint goes through the same clamp, counters and report as `Retry-After`
/// ([`HintPolicy`](crate::hint::HintPolicy)). A malformed header is ignored and counted
/// ([`RetryStats::retry_after_malformed`](crate::retry::RetryStats::retry_after_malformed)).
///
/// The dialects read by default, in this order, and how exactly each wait matches what the
/// server meant (besides the server's own rounding of the value it writes):
///
/// | Dialect | Example | Accuracy |
/// |---|---|---|
/// | `Retry-After`, seconds | `Retry-After: 2` | whole seconds |
/// | `Retry-After`, HTTP-date | `Retry-After: Thu, 01 Jan 2026 00:00:02 GMT` | whole seconds; clock as below |
/// | `retry-after-ms` | `retry-after-ms: 1500` | milliseconds |
/// | IETF `RateLimit`, draft 8 on | `RateLimit: "default";r=0;t=2` | whole seconds |
/// | IETF `RateLimit`, draft-07 | `RateLimit: limit=100, remaining=0, reset=2` | whole seconds |
/// | IETF drafts up to 06 ([`XRateLimit::ietf_draft_06`]) | `RateLimit-Remaining: 0`, `RateLimit-Reset: 2` | whole (or fractional) seconds |
/// | `X-RateLimit-*` ([`XRateLimit::auto`]) | `X-RateLimit-Remaining: 0`, `X-RateLimit-Reset: 1767225602` | Unix time or seconds from now, integer or fractional; clock as below |
///
/// [`ServerHints::openai`] reads OpenAI's quotas besides (not by default):
///
/// | Dialect | Example | Accuracy |
/// |---|---|---|
/// | OpenAI's requests ([`XRateLimit::openai_requests`]) | `x-ratelimit-remaining-requests: 0`, `x-ratelimit-reset-requests: 1s` | a duration with units, to the nanosecond |
/// | OpenAI's tokens ([`XRateLimit::openai_tokens`]) | `x-ratelimit-remaining-tokens: 0`, `x-ratelimit-reset-tokens: 6m0s` | a duration with units, to the nanosecond |
///
/// Absolute times (an epoch reset, an HTTP-date) are measured against the local clock when it
/// agrees with the response's `Date` within the second `Date` is rounded to: exact up to how
/// well the two clocks agree. When they disagree by more, against the `Date`: up to 1 s late,
/// never early. Without a valid `Date`, against the local clock.
///
/// **Quota used up.** A rate-limit header saying nothing is left (`x-ratelimit-remaining: 0`,
/// a `RateLimit` policy with `r=0`) makes a 403 transient (GitHub answers a used-up quota with
/// 403), and on a *successful* response it is not a retry but a pause: with
/// [pacing](crate::Pacing), the endpoint's next requests wait for the reset
/// ([`RetryStats::quota_paused`](crate::retry::RetryStats::quota_paused)).
///
/// **Whether.** `x-should-retry: false` and the presence of `x-envoy-overloaded` stop retrying
/// ([`StopReason::StandDown`](crate::StopReason::StandDown)); `x-should-retry: true` allows a
/// retry that the status or the method alone would not (a 400, a POST without a key). Any other
/// `x-should-retry` value is malformed and ignored.
///
/// ```
/// use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
/// use std::time::{Duration, UNIX_EPOCH};
/// use tower_http_retry::HttpClassifier;
/// use tower_http_retry::hint::{ResetFormat, ResetHeader, ServerHints, XRateLimit};
///
/// // An API that writes its reset as Unix milliseconds.
/// let hints = ServerHints::new().reset_headers([
///     ResetHeader::RetryAfterMs,
///     ResetHeader::XRateLimit(XRateLimit::new(
///         HeaderName::from_static("x-ratelimit-reset"),
///         ResetFormat::EpochMillis,
///     )),
/// ]);
/// let mut headers = HeaderMap::new();
/// headers.insert("date", HeaderValue::from_static("Thu, 01 Jan 2026 00:00:00 GMT"));
/// headers.insert("x-ratelimit-reset", HeaderValue::from_static("1767225630000"));
/// let local_clock = UNIX_EPOCH; // wildly off: the response's Date is used instead
/// let hint = hints.read(StatusCode::TOO_MANY_REQUESTS, &headers, local_clock);
/// assert_eq!(hint.retry_after(), Some(Duration::from_secs(30)));
///
/// let classifier = HttpClassifier::new().hints(hints);
/// # let _ = classifier;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerHints {
    reset: Vec<ResetHeader>,
    should_retry: Option<HeaderName>,
    stand_down: Vec<HeaderName>,
    retry_info: bool,
}

impl ServerHints {
    /// The default: `retry-after-ms`, `RateLimit` (draft 8 on and draft-07),
    /// `RateLimit-Reset` (drafts up to 06), `x-ratelimit-*` (auto format) after `Retry-After`,
    /// then a body's [`RetryInfo`]; `x-should-retry` and `x-envoy-overloaded`.
    pub fn new() -> Self {
        Self {
            reset: vec![
                ResetHeader::RetryAfterMs,
                ResetHeader::RateLimit,
                ResetHeader::XRateLimit(XRateLimit::ietf_draft_06()),
                ResetHeader::XRateLimit(XRateLimit::auto()),
            ],
            should_retry: Some(HeaderName::from_static("x-should-retry")),
            stand_down: vec![HeaderName::from_static("x-envoy-overloaded")],
            retry_info: true,
        }
    }

    /// The defaults of [`new`](Self::new), and OpenAI's request and token quotas
    /// ([`XRateLimit::openai_requests`], [`XRateLimit::openai_tokens`]) after them: for a client
    /// of OpenAI's API (and of the APIs that copy its headers). Not in the defaults: every
    /// reader costs each success a lookup while pacing is on (about 85 instructions, measured
    /// by the instruction gate), for headers most servers never send.
    ///
    /// ```
    /// use tower_http_retry::hint::ServerHints;
    /// use tower_http_retry::{HttpClassifier, RetryLayer};
    ///
    /// let layer = RetryLayer::builder()
    ///     .classifier(HttpClassifier::new().hints(ServerHints::openai()))
    ///     .build()
    ///     .unwrap();
    /// # let _ = layer;
    /// ```
    pub fn openai() -> Self {
        Self::new()
            .add_reset_header(ResetHeader::XRateLimit(XRateLimit::openai_requests()))
            .add_reset_header(ResetHeader::XRateLimit(XRateLimit::openai_tokens()))
    }

    /// `Retry-After` alone: no other reset header, no stand-down marker, no body's
    /// [`RetryInfo`].
    pub fn retry_after_only() -> Self {
        Self {
            reset: Vec::new(),
            should_retry: None,
            stand_down: Vec::new(),
            retry_info: false,
        }
    }

    /// Whether a body's `google.rpc.RetryInfo` ([`RetryInfo`], which a body reader such as
    /// [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer) puts in the response's extensions)
    /// is the hint when no header gave one (default: yes).
    pub fn retry_info(mut self, read: bool) -> Self {
        self.retry_info = read;
        self
    }

    /// What an answer says: its status and headers read as [`read`](Self::read) does, completed
    /// by the body's [`RetryInfo`] a body reader left in its `extensions`.
    pub(crate) fn read_answer(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        extensions: &http::Extensions,
        now: SystemTime,
    ) -> ServerHint {
        let hint = self.read(status, headers, now);
        self.or_retry_info(hint, extensions.get().copied())
    }

    /// `hint`, read from the headers, completed by the body's `info` when it is read: a header
    /// that said when wins, and a malformed `info` is counted only when it was the hint to read,
    /// as an unreadable header is.
    pub(crate) fn or_retry_info(&self, hint: ServerHint, info: Option<RetryInfo>) -> ServerHint {
        if !self.retry_info || hint.retry_after().is_some() {
            return hint;
        }
        match info.map(|info| info.hint()) {
            Some(RetryAfterHint::Delay(delay)) => hint.with_retry_after(Some(delay)),
            Some(RetryAfterHint::Malformed) => hint.with_malformed(true),
            _ => hint,
        }
    }

    /// The reset headers tried after `Retry-After`, in this order (replacing the default list).
    pub fn reset_headers(mut self, headers: impl IntoIterator<Item = ResetHeader>) -> Self {
        self.reset = headers.into_iter().collect();
        self
    }

    /// Adds `header` after the reset headers already listed, keeping them (the defaults, or
    /// those of [`reset_headers`](Self::reset_headers)): an API's own header is read besides
    /// every common dialect.
    ///
    /// ```
    /// use http::HeaderName;
    /// use tower_http_retry::hint::{ResetFormat, ResetHeader, ServerHints, XRateLimit};
    ///
    /// let hints = ServerHints::new().add_reset_header(ResetHeader::XRateLimit(
    ///     XRateLimit::new(HeaderName::from_static("acme-quota-reset"), ResetFormat::DeltaSeconds)
    ///         .remaining(HeaderName::from_static("acme-quota-left")),
    /// ));
    /// # let _ = hints;
    /// ```
    pub fn add_reset_header(mut self, header: ResetHeader) -> Self {
        self.reset.push(header);
        self
    }

    /// The header whose `true` or `false` is the server's word on retrying (default
    /// `x-should-retry`; `None` ignores it).
    pub fn should_retry_header(mut self, name: Option<HeaderName>) -> Self {
        self.should_retry = name;
        self
    }

    /// The headers whose mere presence asks not to retry (replacing the default,
    /// `x-envoy-overloaded`).
    pub fn stand_down_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.stand_down = names.into_iter().collect();
        self
    }

    /// What a response with `status` and `headers` says, read against the local clock `now`
    /// (absolute times against its `Date` when valid).
    pub fn read(&self, status: StatusCode, headers: &HeaderMap, now: SystemTime) -> ServerHint {
        let mut malformed = false;
        let mut should_retry = None;
        if let Some(value) = self
            .should_retry
            .as_ref()
            .and_then(|name| headers.get(name))
        {
            match trim_ows(value.as_bytes()).to_ascii_lowercase().as_slice() {
                b"true" => should_retry = Some(true),
                b"false" => should_retry = Some(false),
                _ => malformed = true,
            }
        }
        if self
            .stand_down
            .iter()
            .any(|name| headers.contains_key(name))
        {
            should_retry = Some(false);
        }
        // A success carries no "come back in", only a quota that is used up.
        let success = status.as_u16() < 400;
        let mut after = None;
        let mut quota_reset = false;
        if !success {
            match parse_retry_after(headers, now) {
                RetryAfterHint::Delay(delay) => after = Some(delay),
                RetryAfterHint::Malformed => malformed = true,
                RetryAfterHint::Absent => {}
            }
        }
        if after.is_none() {
            // Read (the `Date` parsed) only for a reset header that has a value to measure.
            let mut reference = None;
            let mut now = || *reference.get_or_insert_with(|| reference_time(headers, now));
            let reset = self.reset(status, headers, &mut now);
            after = reset.after;
            quota_reset = reset.window;
            malformed |= reset.malformed;
        }
        if after.is_some() && !quota_reset {
            // A `Retry-After` beside a quota that is used up: the endpoint waits too.
            quota_reset = self.quota_exhausted(headers);
        }
        ServerHint::NONE
            .with_should_retry(should_retry)
            .with_retry_after(after)
            .with_quota_reset(quota_reset)
            .with_malformed(malformed)
    }

    /// What the reset headers say of a response with `status`, in their order until one has a
    /// reset time. `now` is asked only for a reset value to measure.
    fn reset(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        now: &mut dyn FnMut() -> SystemTime,
    ) -> Reset {
        let success = status.as_u16() < 400;
        let limited = matches!(status.as_u16(), 429 | 503);
        let mut malformed = false;
        for header in &self.reset {
            let reading = match header {
                ResetHeader::RetryAfterMs if success => Reading::Absent,
                ResetHeader::RetryAfterMs => retry_after_ms(headers),
                ResetHeader::RateLimit => ietf(headers),
                ResetHeader::XRateLimit(header) => header.read(headers, now, limited),
            };
            match reading {
                Reading::Absent => {}
                Reading::Malformed => malformed = true,
                Reading::Reset { after: reset, .. } => {
                    // A used-up quota without a reset time: a later header may have one.
                    if reset.is_some() {
                        return Reset {
                            after: reset,
                            // A rate-limit window's reset covers the endpoint; a delay in
                            // milliseconds is this request's, as `Retry-After` is.
                            window: !matches!(header, ResetHeader::RetryAfterMs),
                            malformed,
                        };
                    }
                }
            }
        }
        Reset {
            after: None,
            window: false,
            malformed,
        }
    }

    /// [`read`](Self::read)'s `retry_after` for a success status (below 400): a used-up quota's
    /// reset, from the reset headers alone (the stand-down headers say nothing of when). The
    /// wall clock is read, and the `Date` parsed, only for a reset value to measure.
    pub(crate) fn success_reset(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        now: &dyn Fn() -> SystemTime,
    ) -> Option<Duration> {
        debug_assert!(status.as_u16() < 400);
        let mut reference = None;
        let mut now = || *reference.get_or_insert_with(|| reference_time(headers, now()));
        self.reset(status, headers, &mut now).after
    }

    /// Whether a rate-limit header says the quota is used up.
    pub(crate) fn quota_exhausted(&self, headers: &HeaderMap) -> bool {
        self.reset.iter().any(|header| match header {
            ResetHeader::RetryAfterMs => false,
            ResetHeader::RateLimit => matches!(
                ietf(headers),
                Reading::Reset {
                    exhausted: true,
                    ..
                }
            ),
            ResetHeader::XRateLimit(header) => header.exhausted(headers),
        })
    }
}

/// What the reset headers said ([`ServerHints::reset`]).
struct Reset {
    /// When to come back, from the first header that has a reset time.
    after: Option<Duration>,
    /// That header's reset is a rate-limit window's (it covers the endpoint).
    window: bool,
    /// A header before it (or any, without one) was malformed.
    malformed: bool,
}

impl Default for ServerHints {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::ResetFormat;
    use http::HeaderValue;
    use std::time::{Duration, UNIX_EPOCH};

    /// Thu, 01 Jan 2026 00:00:00 GMT.
    const T: u64 = 1_767_225_600;
    const DATE: &str = "Thu, 01 Jan 2026 00:00:00 GMT";

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn read(
        hints: &ServerHints,
        status: u16,
        pairs: &[(&'static str, &str)],
        now: u64,
    ) -> ServerHint {
        let status = StatusCode::from_u16(status).unwrap();
        hints.read(status, &headers(pairs), at(now))
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    /// One row: what a response says, and what the default hints read from it.
    struct Case {
        name: &'static str,
        status: u16,
        headers: &'static [(&'static str, &'static str)],
        /// The local clock; the response's `Date`, when present, is `T`.
        now: u64,
        after: Option<Duration>,
        malformed: bool,
    }

    const fn case(
        name: &'static str,
        status: u16,
        headers: &'static [(&'static str, &'static str)],
        after: Option<Duration>,
        malformed: bool,
    ) -> Case {
        Case {
            name,
            status,
            headers,
            now: T,
            after,
            malformed,
        }
    }

    #[test]
    fn a_quota_reset_covers_the_endpoint_and_a_retry_after_does_not() {
        let hints = ServerHints::new();
        let quota = |status, pairs: &[(&'static str, &str)]| {
            let hint = read(&hints, status, pairs, T);
            (hint.retry_after().is_some(), hint.is_quota_reset())
        };
        // RFC 9110: the wait of the request it answers.
        assert_eq!(quota(429, &[("retry-after", "1")]), (true, false));
        assert_eq!(quota(503, &[("retry-after", "1")]), (true, false));
        assert_eq!(quota(429, &[("retry-after-ms", "300")]), (true, false));
        // A used-up quota, or a limited response's window reset: the endpoint's.
        assert_eq!(quota(429, &[("ratelimit", "\"d\";r=0;t=2")]), (true, true));
        assert_eq!(
            quota(
                403,
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "2")]
            ),
            (true, true)
        );
        assert_eq!(quota(429, &[("x-ratelimit-reset", "2")]), (true, true));
        assert_eq!(
            quota(429, &[("retry-after", "1"), ("x-ratelimit-remaining", "0")]),
            (true, true),
            "a Retry-After beside a used-up quota"
        );
        assert_eq!(
            quota(
                200,
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "2")]
            ),
            (true, true)
        );
        assert_eq!(quota(429, &[]), (false, false));
    }

    #[test]
    fn the_latest_ratelimit_draft_with_quota_units_and_partition_keys_is_read() {
        // draft-ietf-httpapi-ratelimit-headers-10's fields: `qu` (quota unit) and `pk` (a
        // partition key, a byte sequence) beside `q`, `w`, `r` and `t`.
        let response = headers(&[
            (
                "ratelimit-policy",
                "\"burst\";q=100;w=60;qu=\"requests\";pk=:cHJvamVjdC0x:, \"daily\";q=1000;w=86400",
            ),
            (
                "ratelimit",
                "\"burst\";r=0;t=30;pk=:cHJvamVjdC0x:, \"daily\";r=120;t=3600",
            ),
        ]);
        let hint =
            ServerHints::new().read(StatusCode::TOO_MANY_REQUESTS, &response, SystemTime::now());
        assert_eq!(hint.retry_after(), Some(Duration::from_secs(30)));
        assert!(!hint.is_malformed());
        // A used-up policy without `t`: its declared window.
        let response = headers(&[
            ("ratelimit-policy", "\"burst\";q=100;w=60;qu=\"requests\""),
            ("ratelimit", "\"burst\";r=0;pk=:cHJvamVjdC0x:"),
        ]);
        let hint =
            ServerHints::new().read(StatusCode::TOO_MANY_REQUESTS, &response, SystemTime::now());
        assert_eq!(hint.retry_after(), Some(Duration::from_secs(60)));
    }

    #[test]
    fn openai_resets_are_durations_with_units_read_when_their_quota_is_used_up() {
        // OpenAI's documented example: 59 requests left (its reset is no hint), no token left.
        let hints = ServerHints::openai();
        let response = headers(&[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        let hint = hints.read(StatusCode::TOO_MANY_REQUESTS, &response, SystemTime::now());
        assert_eq!(hint.retry_after(), Some(Duration::from_secs(360)));
        // Not read by default.
        let default =
            ServerHints::new().read(StatusCode::TOO_MANY_REQUESTS, &response, SystemTime::now());
        assert_eq!(default.retry_after(), None);
        let requests_out = headers(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1h2m3.5s"),
        ]);
        let hint = hints.read(
            StatusCode::TOO_MANY_REQUESTS,
            &requests_out,
            SystemTime::now(),
        );
        assert_eq!(hint.retry_after(), Some(Duration::from_millis(3_723_500)));
        for (raw, expected) in [
            ("20ms", Some(Duration::from_millis(20))),
            ("0", Some(Duration::ZERO)),
            ("1.5us", Some(Duration::from_nanos(1500))),
            ("2m", Some(Duration::from_secs(120))),
            ("", None),
            ("5", None),
            ("-1s", None),
            ("1d", None),
            ("s", None),
        ] {
            assert_eq!(
                super::super::rate_limit::go_duration(raw.as_bytes()),
                expected,
                "{raw:?}"
            );
        }
    }

    #[test]
    fn default_hints_read_every_rate_limit_dialect() {
        let ms = |m: u64| Some(Duration::from_millis(m));
        let cases = [
            case(
                "retry-after-ms",
                429,
                &[("retry-after-ms", "1500")],
                ms(1500),
                false,
            ),
            case(
                "retry-after-ms with spaces",
                503,
                &[("retry-after-ms", " 20 ")],
                ms(20),
                false,
            ),
            case(
                "negative retry-after-ms",
                429,
                &[("retry-after-ms", "-5")],
                None,
                true,
            ),
            case(
                "fractional retry-after-ms",
                429,
                &[("retry-after-ms", "1.5")],
                None,
                true,
            ),
            case(
                "Retry-After wins over retry-after-ms",
                429,
                &[("retry-after", "7"), ("retry-after-ms", "100")],
                secs(7),
                false,
            ),
            case(
                "a malformed Retry-After falls through to the next header",
                429,
                &[("retry-after", "soon"), ("retry-after-ms", "100")],
                ms(100),
                true,
            ),
            case(
                "IETF, String name",
                429,
                &[("ratelimit", "\"default\";r=0;t=30")],
                secs(30),
                false,
            ),
            case(
                "IETF, Token name",
                429,
                &[("ratelimit", "default;r=0;t=30")],
                secs(30),
                false,
            ),
            case(
                "IETF, the largest t among exhausted policies",
                429,
                &[(
                    "ratelimit",
                    "\"burst\";r=0;t=10, \"daily\";r=0;t=50, \"hour\";r=9;t=900",
                )],
                secs(50),
                false,
            ),
            case(
                "IETF, policies over two field lines",
                429,
                &[
                    ("ratelimit", "\"a\";r=0;t=4"),
                    ("ratelimit", "\"b\";r=0;t=8"),
                ],
                secs(8),
                false,
            ),
            case(
                "IETF, nothing used up",
                429,
                &[("ratelimit", "\"default\";r=5;t=30")],
                None,
                false,
            ),
            case(
                "IETF, no t: the policy's window",
                429,
                &[
                    ("ratelimit", "\"default\";r=0"),
                    ("ratelimit-policy", "\"default\";q=100;w=60"),
                ],
                secs(60),
                false,
            ),
            case(
                "IETF, no t and no policy",
                429,
                &[("ratelimit", "\"default\";r=0")],
                None,
                false,
            ),
            case(
                "IETF, r missing",
                429,
                &[("ratelimit", "\"default\";t=30")],
                None,
                true,
            ),
            case(
                "IETF, negative t",
                429,
                &[("ratelimit", "\"default\";r=0;t=-1")],
                None,
                true,
            ),
            case(
                "IETF, decimal t",
                429,
                &[("ratelimit", "\"default\";r=0;t=1.5")],
                None,
                true,
            ),
            case(
                "IETF, bad syntax",
                429,
                &[("ratelimit", "\"default\";r=0;t=30,")],
                None,
                true,
            ),
            case(
                "IETF, an integer for a name",
                429,
                &[("ratelimit", "5;r=0;t=30")],
                None,
                true,
            ),
            case(
                "IETF draft-07, a used-up dictionary",
                429,
                &[("ratelimit", "limit=100, remaining=0, reset=2")],
                secs(2),
                false,
            ),
            case(
                "IETF draft-07, with its policy field and keys in any order",
                429,
                &[
                    ("ratelimit", "reset=30, limit=100, remaining=0"),
                    ("ratelimit-policy", "100;w=60"),
                ],
                secs(30),
                false,
            ),
            case(
                "IETF draft-07, quota left",
                429,
                &[("ratelimit", "limit=100, remaining=4, reset=2")],
                None,
                false,
            ),
            case(
                "IETF draft-07, no remaining",
                429,
                &[("ratelimit", "limit=100, reset=2")],
                None,
                true,
            ),
            case(
                "IETF draft-07, a negative reset",
                429,
                &[("ratelimit", "limit=100, remaining=0, reset=-2")],
                None,
                true,
            ),
            case(
                "IETF draft-07, a decimal remaining",
                429,
                &[("ratelimit", "limit=100, remaining=0.5, reset=2")],
                None,
                true,
            ),
            case(
                "IETF drafts up to 06, seconds from now",
                429,
                &[
                    ("ratelimit-limit", "100"),
                    ("ratelimit-remaining", "0"),
                    ("ratelimit-reset", "2"),
                ],
                secs(2),
                false,
            ),
            case(
                "IETF drafts up to 06, a reset on a 429 without a remaining count",
                429,
                &[("ratelimit-reset", "7")],
                secs(7),
                false,
            ),
            case(
                "IETF drafts up to 06, quota left",
                503,
                &[("ratelimit-remaining", "3"), ("ratelimit-reset", "7")],
                None,
                false,
            ),
            case(
                "IETF drafts up to 06, a Unix time where seconds belong",
                429,
                &[
                    ("date", DATE),
                    ("ratelimit-remaining", "0"),
                    ("ratelimit-reset", "1767225612"),
                ],
                secs(12),
                false,
            ),
            case(
                "IETF drafts up to 06, a malformed reset",
                429,
                &[("ratelimit-remaining", "0"), ("ratelimit-reset", "2s")],
                None,
                true,
            ),
            case(
                "draft 8 wins over the older fields it replaces",
                429,
                &[
                    ("ratelimit", "\"q\";r=0;t=9"),
                    ("ratelimit-remaining", "0"),
                    ("ratelimit-reset", "2"),
                ],
                secs(9),
                false,
            ),
            case(
                "x-ratelimit, epoch against Date",
                403,
                &[
                    ("date", DATE),
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "1767225615"),
                ],
                secs(15),
                false,
            ),
            case(
                "x-ratelimit, a delta in auto mode",
                429,
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "42")],
                secs(42),
                false,
            ),
            case(
                "x-ratelimit, epoch milliseconds in auto mode",
                429,
                &[
                    ("date", DATE),
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "1767225605000"),
                ],
                secs(5),
                false,
            ),
            case(
                "x-ratelimit, a fractional epoch",
                429,
                &[
                    ("date", DATE),
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "1767225605.250"),
                ],
                Some(Duration::from_millis(5250)),
                false,
            ),
            case(
                "x-ratelimit, quota left: the reset is not the problem",
                503,
                &[("x-ratelimit-remaining", "12"), ("x-ratelimit-reset", "30")],
                None,
                false,
            ),
            case(
                "x-ratelimit, a 429 says so without a remaining count",
                429,
                &[("x-ratelimit-reset", "30")],
                secs(30),
                false,
            ),
            case(
                "x-ratelimit, a 403 does not say so without a remaining count",
                403,
                &[("x-ratelimit-reset", "30")],
                None,
                false,
            ),
            case(
                "x-ratelimit, a malformed remaining count",
                429,
                &[
                    ("x-ratelimit-remaining", "none"),
                    ("x-ratelimit-reset", "30"),
                ],
                None,
                true,
            ),
            case(
                "x-ratelimit, a malformed reset",
                429,
                &[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "later"),
                ],
                None,
                true,
            ),
            case(
                "a success that used up its quota",
                200,
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "30")],
                secs(30),
                false,
            ),
            case(
                "a success with quota left",
                200,
                &[("x-ratelimit-remaining", "3"), ("x-ratelimit-reset", "30")],
                None,
                false,
            ),
            case(
                "a success's Retry-After and retry-after-ms mean nothing",
                200,
                &[("retry-after", "30"), ("retry-after-ms", "30")],
                None,
                false,
            ),
            case(
                "IETF on a success",
                200,
                &[("ratelimit", "\"q\";r=0;t=9")],
                secs(9),
                false,
            ),
        ];
        let hints = ServerHints::new();
        for case in cases {
            let hint = read(&hints, case.status, case.headers, case.now);
            assert_eq!(hint.retry_after(), case.after, "{}", case.name);
            assert_eq!(hint.is_malformed(), case.malformed, "{}", case.name);
            if case.status < 400 {
                // What pacing asks of a success: the reset headers alone, the same answer.
                let status = StatusCode::from_u16(case.status).unwrap();
                let reset = hints.success_reset(status, &headers(case.headers), &|| at(case.now));
                assert_eq!(reset, case.after, "{}", case.name);
            }
        }
    }

    #[test]
    fn a_success_without_a_reset_value_reads_no_clock() {
        let hints = ServerHints::new();
        let never = || -> SystemTime { panic!("the clock was read") };
        let quiet = headers(&[("x-should-retry", "false"), ("x-ratelimit-remaining", "3")]);
        assert_eq!(hints.success_reset(StatusCode::OK, &quiet, &never), None);
        assert_eq!(
            hints.success_reset(StatusCode::OK, &HeaderMap::new(), &never),
            None
        );
    }

    #[test]
    fn epoch_values_follow_the_response_date_not_a_skewed_local_clock() {
        let reset = [
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1767225630"),
        ];
        let hints = ServerHints::new();
        for skew in [0, 3600, 86_400 * 30] {
            let mut pairs = vec![("date", DATE)];
            pairs.extend(reset);
            // Local clock an hour (a month) fast, and an hour slow.
            assert_eq!(read(&hints, 429, &pairs, T + skew).retry_after(), secs(30));
            assert_eq!(read(&hints, 429, &pairs, T - skew).retry_after(), secs(30));
        }
        // Without a Date, the local clock is all there is.
        assert_eq!(read(&hints, 429, &reset, T + 10).retry_after(), secs(20));
        // An HTTP-date Retry-After too.
        let pairs = [
            ("date", DATE),
            ("retry-after", "Thu, 01 Jan 2026 00:01:00 GMT"),
        ];
        assert_eq!(read(&hints, 503, &pairs, T + 3600).retry_after(), secs(60));
    }

    #[test]
    fn a_local_clock_that_agrees_with_date_measures_epochs_to_the_millisecond() {
        let reset = [
            ("date", DATE),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1767225602"),
        ];
        let hints = ServerHints::new();
        let status = StatusCode::TOO_MANY_REQUESTS;
        let map = headers(&reset);
        // Anywhere within the second the Date was rounded down from, the local clock is used:
        // the reset 2.000 s after T, read at T + 0.909 s, is 1.091 s away, not 2 s.
        for (local_ms, expected_ms) in [(0, 2000), (1, 1999), (909, 1091), (1000, 1000)] {
            let now = at(T) + Duration::from_millis(local_ms);
            assert_eq!(
                hints.read(status, &map, now).retry_after(),
                Some(Duration::from_millis(expected_ms)),
                "local clock T + {local_ms} ms"
            );
        }
        // Beyond it (or behind the Date), the clocks disagree: the Date is the reference.
        for local_ms in [1001, 5000] {
            let now = at(T) + Duration::from_millis(local_ms);
            assert_eq!(hints.read(status, &map, now).retry_after(), secs(2));
        }
        let behind = at(T) - Duration::from_millis(1);
        assert_eq!(hints.read(status, &map, behind).retry_after(), secs(2));
        // An HTTP-date Retry-After is measured the same way.
        let date = [
            ("date", DATE),
            ("retry-after", "Thu, 01 Jan 2026 00:00:02 GMT"),
        ];
        let now = at(T) + Duration::from_millis(250);
        assert_eq!(
            hints.read(status, &headers(&date), now).retry_after(),
            Some(Duration::from_millis(1750))
        );
    }

    #[test]
    fn an_added_reset_header_is_read_besides_the_defaults() {
        let acme = XRateLimit::new(
            HeaderName::from_static("acme-quota-reset"),
            ResetFormat::DeltaSeconds,
        )
        .remaining(HeaderName::from_static("acme-quota-left"));
        let hints = ServerHints::new().add_reset_header(ResetHeader::XRateLimit(acme));
        let custom = [("acme-quota-left", "0"), ("acme-quota-reset", "4")];
        assert_eq!(read(&hints, 429, &custom, T).retry_after(), secs(4));
        assert!(hints.quota_exhausted(&headers(&custom)));
        // Every default is still read, ahead of the added one.
        for pairs in [
            &[("retry-after-ms", "100")][..],
            &[("ratelimit", "limit=1, remaining=0, reset=3")],
            &[("ratelimit-remaining", "0"), ("ratelimit-reset", "3")],
            &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "3")],
        ] {
            assert_eq!(
                read(&hints, 429, pairs, T).retry_after(),
                read(&ServerHints::new(), 429, pairs, T).retry_after(),
                "{pairs:?}"
            );
            assert!(
                read(&hints, 429, pairs, T).retry_after().is_some(),
                "{pairs:?}"
            );
        }
        // `reset_headers` replaces; adding to it keeps what it set.
        let only_acme = ServerHints::retry_after_only().add_reset_header(ResetHeader::XRateLimit(
            XRateLimit::new(
                HeaderName::from_static("acme-quota-reset"),
                ResetFormat::DeltaSeconds,
            ),
        ));
        assert_eq!(read(&only_acme, 429, &custom, T).retry_after(), secs(4));
        let x = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "3")];
        assert_eq!(read(&only_acme, 429, &x, T).retry_after(), None);
    }

    #[test]
    fn declared_formats_read_the_same_digits_differently() {
        let at_date = |format| {
            let hints = ServerHints::new().reset_headers([ResetHeader::XRateLimit(
                XRateLimit::new(HeaderName::from_static("x-ratelimit-reset"), format),
            )]);
            read(
                &hints,
                429,
                &[("date", DATE), ("x-ratelimit-reset", "1767225630")],
                T,
            )
            .retry_after()
        };
        assert_eq!(at_date(ResetFormat::EpochSeconds), secs(30));
        assert_eq!(at_date(ResetFormat::AUTO), secs(30));
        // Read as milliseconds, that epoch is in 1970: already past.
        assert_eq!(at_date(ResetFormat::EpochMillis), secs(0));
        // Read as a delta it is 56 years; the clamp deals with it.
        assert_eq!(at_date(ResetFormat::DeltaSeconds), secs(1_767_225_630));
        // Auto with a window too narrow to take it for an epoch.
        let narrow = ResetFormat::Auto {
            window: Duration::from_secs(10),
        };
        assert_eq!(at_date(narrow), secs(1_767_225_630));
    }

    #[test]
    fn the_reset_order_is_configurable() {
        let pairs = [("retry-after-ms", "100"), ("ratelimit", "\"q\";r=0;t=9")];
        let ms_first = ServerHints::new();
        let ietf_first =
            ServerHints::new().reset_headers([ResetHeader::RateLimit, ResetHeader::RetryAfterMs]);
        assert_eq!(
            read(&ms_first, 429, &pairs, T).retry_after(),
            Some(Duration::from_millis(100))
        );
        assert_eq!(read(&ietf_first, 429, &pairs, T).retry_after(), secs(9));
        let only_retry_after = ServerHints::retry_after_only();
        assert_eq!(read(&only_retry_after, 429, &pairs, T).retry_after(), None);
    }

    #[test]
    fn stand_down_markers() {
        let hints = ServerHints::new();
        type Headers = &'static [(&'static str, &'static str)];
        let cases: [(Headers, Option<bool>, bool); 7] = [
            (&[("x-should-retry", "false")], Some(false), false),
            (&[("x-should-retry", "true")], Some(true), false),
            (&[("x-should-retry", " TRUE ")], Some(true), false),
            (&[("x-should-retry", "maybe")], None, true),
            (&[("x-envoy-overloaded", "true")], Some(false), false),
            (&[("x-envoy-overloaded", "")], Some(false), false),
            (
                &[("x-should-retry", "true"), ("x-envoy-overloaded", "true")],
                Some(false),
                false,
            ),
        ];
        for (pairs, should_retry, malformed) in cases {
            let hint = read(&hints, 503, pairs, T);
            assert_eq!(hint.should_retry(), should_retry, "{pairs:?}");
            assert_eq!(hint.is_malformed(), malformed, "{pairs:?}");
        }
        let ignored = ServerHints::new()
            .should_retry_header(None)
            .stand_down_headers([]);
        let pairs = [("x-should-retry", "false"), ("x-envoy-overloaded", "true")];
        assert_eq!(read(&ignored, 503, &pairs, T).should_retry(), None);
        let custom = ServerHints::new().stand_down_headers([HeaderName::from_static("x-shed")]);
        assert_eq!(
            read(&custom, 503, &[("x-shed", "1")], T).should_retry(),
            Some(false)
        );
    }

    #[test]
    fn a_used_up_quota_is_seen_by_any_rate_limit_header() {
        let hints = ServerHints::new();
        let exhausted = |pairs: &[(&'static str, &str)]| hints.quota_exhausted(&headers(pairs));
        assert!(exhausted(&[("x-ratelimit-remaining", "0")]));
        assert!(exhausted(&[("ratelimit", "\"q\";r=0")]));
        assert!(exhausted(&[("ratelimit", "limit=5, remaining=0, reset=9")]));
        assert!(exhausted(&[("ratelimit-remaining", "0")]));
        assert!(!exhausted(&[(
            "ratelimit",
            "limit=5, remaining=2, reset=9"
        )]));
        assert!(!exhausted(&[("x-ratelimit-remaining", "1")]));
        assert!(!exhausted(&[("ratelimit", "\"q\";r=1;t=5")]));
        assert!(!exhausted(&[("retry-after", "5")]));
        assert!(!ServerHints::retry_after_only()
            .quota_exhausted(&headers(&[("x-ratelimit-remaining", "0")])));
    }

    #[test]
    fn a_header_hint_wins_over_the_body_and_its_malformed_body_is_not_counted() {
        let hints = ServerHints::new();
        let header = ServerHint::after(Duration::from_secs(1));
        let body = Some(RetryInfo::after(Duration::from_secs(9)));
        let bad = Some(RetryInfo::malformed());
        assert_eq!(hints.or_retry_info(header, body), header);
        assert_eq!(hints.or_retry_info(header, bad), header);
        // A malformed header beside a good body: the body's delay, the header counted.
        let hint = hints.or_retry_info(ServerHint::malformed(), body);
        assert_eq!(hint.retry_after(), Some(Duration::from_secs(9)));
        assert!(hint.is_malformed());
        assert!(hints.or_retry_info(ServerHint::NONE, bad).is_malformed());
        assert_eq!(
            hints.or_retry_info(ServerHint::NONE, None),
            ServerHint::NONE
        );
        // Switched off, the body says nothing.
        let off = ServerHints::retry_after_only();
        assert_eq!(off.or_retry_info(ServerHint::NONE, body), ServerHint::NONE);
    }
}
