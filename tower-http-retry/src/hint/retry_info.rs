//! `google.rpc.RetryInfo` in a JSON error body (AIP-193), as Google's APIs and Gemini send it
//! with a 429 or a 503, where no header says when to come back.

#[cfg(feature = "json")]
use super::decimal;
use super::RetryAfterHint;
#[cfg(feature = "json")]
use http::header::{HeaderMap, CONTENT_TYPE};
use std::time::Duration;

/// The type of a `RetryInfo` among an error's `details`.
#[cfg(feature = "json")]
const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// What a body must contain to be parsed for one.
#[cfg(feature = "json")]
const RETRY_INFO_NAME: &[u8] = b"google.rpc.RetryInfo";

/// The wait a response's body asked for, in a `google.rpc.RetryInfo`: put in the response's
/// extensions by [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer) (feature `json`) when it
/// reads a transient JSON body, or by a caller's own layer that reads bodies; read by
/// [`HttpClassifier`](crate::HttpClassifier) when no header hint (`Retry-After`, a reset
/// header) says when to retry (see [`ServerHints::retry_info`](super::ServerHints::retry_info)),
/// and clamped like any hint.
///
/// ```
/// # #[cfg(feature = "json")] {
/// use std::time::Duration;
/// use tower_http_retry::hint::{RetryAfterHint, RetryInfo};
///
/// // Gemini's 429, shortened.
/// let body = br#"{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
///     {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "52s"}]}}"#;
/// let info = RetryInfo::from_json(body).unwrap();
/// assert_eq!(info.hint(), RetryAfterHint::Delay(Duration::from_secs(52)));
/// assert_eq!(RetryInfo::from_json(b"<html>503</html>"), None);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryInfo(RetryAfterHint);

impl RetryInfo {
    /// A `RetryInfo` that says to wait `delay`.
    pub const fn after(delay: Duration) -> Self {
        Self(RetryAfterHint::Delay(delay))
    }

    /// A `RetryInfo` whose delay could not be read (counted as a malformed hint, then ignored).
    pub const fn malformed() -> Self {
        Self(RetryAfterHint::Malformed)
    }

    /// What it says: [`Delay`](RetryAfterHint::Delay) or [`Malformed`](RetryAfterHint::Malformed).
    pub const fn hint(&self) -> RetryAfterHint {
        self.0
    }

    /// Reads the `RetryInfo` of a JSON error body: `{"error": {"details": [...]}}`, or an array
    /// of those as some Google APIs send. `None` when the body is not JSON or holds no
    /// `RetryInfo`; [`malformed`](Self::malformed) when its `retryDelay` is not a protobuf JSON
    /// duration (`"30s"`, `"1.5s"`: seconds, up to nine decimals, an `s`) or is negative. A
    /// `RetryInfo` without a `retryDelay` says zero, as protobuf's default (and as the gRPC
    /// crate reads one in a call's rich status).
    #[cfg(feature = "json")]
    pub fn from_json(body: &[u8]) -> Option<Self> {
        use serde_json::Value;
        let value: Value = serde_json::from_slice(body).ok()?;
        let errors = match &value {
            Value::Array(errors) => errors.iter().collect(),
            error => vec![error],
        };
        let info = errors
            .into_iter()
            .filter_map(|error| error.get("error")?.get("details")?.as_array())
            .flatten()
            .find(|detail| detail.get("@type").and_then(Value::as_str) == Some(RETRY_INFO))?;
        let delay = match info.get("retryDelay") {
            None => Some(Duration::ZERO),
            Some(delay) => delay.as_str().and_then(parse_duration),
        };
        Some(delay.map_or(Self::malformed(), Self::after))
    }
}

/// Puts the `RetryInfo` of a whole body that
/// [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer) read in its response's extensions, for
/// the classifier; nothing without the feature `json`.
pub(crate) fn read_body_hint(head: &mut http::response::Parts, body: &[u8]) {
    #[cfg(feature = "json")]
    if let Some(info) = of_json_response(&head.headers, body) {
        head.extensions.insert(info);
    }
    #[cfg(not(feature = "json"))]
    let _ = (head, body);
}

/// The `RetryInfo` of a whole response body read by
/// [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer), when its `Content-Type` says JSON
/// (`application/json`, `application/problem+json`) and it names a `RetryInfo` at all (most
/// error bodies are not parsed).
#[cfg(feature = "json")]
fn of_json_response(headers: &HeaderMap, body: &[u8]) -> Option<RetryInfo> {
    let essence = headers.get(CONTENT_TYPE)?.as_bytes();
    let essence = essence.split(|&b| b == b';').next()?.trim_ascii();
    let json = essence.eq_ignore_ascii_case(b"application/json")
        || (essence.len() > 5 && essence[essence.len() - 5..].eq_ignore_ascii_case(b"+json"));
    let named = || {
        body.windows(RETRY_INFO_NAME.len())
            .any(|w| w == RETRY_INFO_NAME)
    };
    if json && named() {
        RetryInfo::from_json(body)
    } else {
        None
    }
}

/// A protobuf JSON `Duration` that is not negative: `"3s"`, `"1.5s"`, `"0.000000001s"`
/// (seconds past `u64` saturate, as delta-seconds do; the clamp deals with them).
#[cfg(feature = "json")]
fn parse_duration(text: &str) -> Option<Duration> {
    let number = text.strip_suffix('s')?.as_bytes();
    let (seconds, nanos) = match number.iter().position(|&b| b == b'.') {
        None => (number, 0),
        Some(dot) => {
            let fraction = &number[dot + 1..];
            if fraction.is_empty() || fraction.len() > 9 {
                return None;
            }
            let digits = u32::try_from(decimal(fraction)?).ok()?;
            (
                &number[..dot],
                digits * 10u32.pow(9 - fraction.len() as u32),
            )
        }
    };
    Some(Duration::new(decimal(seconds)?, nanos))
}

#[cfg(all(test, feature = "json"))]
mod tests {
    use super::*;

    fn delay(body: &str) -> Option<RetryAfterHint> {
        RetryInfo::from_json(body.as_bytes()).map(|info| info.hint())
    }

    #[test]
    fn a_quota_error_with_several_details_and_nine_decimals() {
        // The shape of Gemini's free-tier 429 (AIP-193 details in the JSON mapping): a
        // QuotaFailure and a Help before the RetryInfo, its delay to the nanosecond.
        let body = r#"{
          "error": {
            "code": 429,
            "message": "You exceeded your current quota.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
              {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
               "violations": [{"quotaMetric": "generate_content_free_tier_requests",
                               "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
              {"@type": "type.googleapis.com/google.rpc.Help", "links": []},
              {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "57.238747106s"}
            ]
          }
        }"#;
        assert_eq!(
            delay(body),
            Some(RetryAfterHint::Delay(Duration::new(57, 238_747_106)))
        );
    }

    #[test]
    fn an_array_of_errors_and_a_fractional_delay() {
        let body = r#"[{"error": {"code": 503, "details": [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}}]"#;
        assert_eq!(
            delay(body),
            Some(RetryAfterHint::Delay(Duration::from_millis(1_500)))
        );
    }

    #[test]
    fn no_retry_info_or_no_json_is_nothing() {
        assert_eq!(
            delay(r#"{"error": {"code": 429, "message": "slow down"}}"#),
            None
        );
        assert_eq!(delay(r#"{"error": {"details": []}}"#), None);
        assert_eq!(delay("Service Unavailable"), None);
        assert_eq!(delay(""), None);
    }

    #[test]
    fn a_delay_that_is_no_duration_is_malformed() {
        for bad in [
            r#""-1s""#,
            r#""30""#,
            r#""s""#,
            r#""1.s""#,
            r#""1.0000000001s""#,
            "30",
        ] {
            let body = format!(
                r#"{{"error": {{"details": [{{"@type": "{RETRY_INFO}", "retryDelay": {bad}}}]}}}}"#
            );
            assert_eq!(delay(&body), Some(RetryAfterHint::Malformed), "{bad}");
        }
        let missing = format!(r#"{{"error": {{"details": [{{"@type": "{RETRY_INFO}"}}]}}}}"#);
        assert_eq!(delay(&missing), Some(RetryAfterHint::Delay(Duration::ZERO)));
    }

    #[test]
    fn durations_by_the_protobuf_json_mapping() {
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        assert_eq!(parse_duration("3.000000001s"), Some(Duration::new(3, 1)));
        assert_eq!(parse_duration("0.25s"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1e3s"), None);
        assert_eq!(parse_duration("+1s"), None);
        assert_eq!(parse_duration(".5s"), None);
        assert_eq!(parse_duration("1.2.3s"), None);
        assert_eq!(parse_duration("1.s"), None);
    }

    #[test]
    fn only_a_json_body_that_names_a_retry_info_is_parsed() {
        let body = format!(
            r#"{{"error": {{"details": [{{"@type": "{RETRY_INFO}", "retryDelay": "2s"}}]}}}}"#
        );
        let of = |content_type: Option<&'static str>, body: &str| {
            let mut headers = HeaderMap::new();
            if let Some(value) = content_type {
                headers.insert(CONTENT_TYPE, http::HeaderValue::from_static(value));
            }
            of_json_response(&headers, body.as_bytes()).map(|info| info.hint())
        };
        let two = Some(RetryAfterHint::Delay(Duration::from_secs(2)));
        assert_eq!(of(Some("application/json"), &body), two);
        assert_eq!(of(Some("Application/JSON; charset=UTF-8"), &body), two);
        assert_eq!(of(Some("application/problem+json"), &body), two);
        assert_eq!(of(Some("text/plain"), &body), None);
        assert_eq!(of(Some("+json"), &body), None);
        assert_eq!(of(None, &body), None);
        let other = r#"{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.Help"}]}}"#;
        assert_eq!(of(Some("application/json"), other), None);
    }
}
