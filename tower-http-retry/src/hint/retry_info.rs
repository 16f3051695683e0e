//! `google.rpc.RetryInfo` in a JSON error body (AIP-193), as Google's APIs and Gemini send it
//! with a 429 or a 503, where no header says when to come back.

use super::{RetryAfterHint, ServerHint};
use http::header::{HeaderMap, CONTENT_TYPE};
use std::time::Duration;

/// The type of a `RetryInfo` among an error's `details`.
#[cfg(feature = "json")]
const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The wait a response's body asked for, in a `google.rpc.RetryInfo`: put in the response's
/// extensions by [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer) (feature `json`) when it
/// reads a transient JSON body, or by a caller's own layer that reads bodies; read by
/// [`HttpClassifier`](crate::HttpClassifier) when no `Retry-After` header says when to retry,
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
    /// duration (`"30s"`, `"1.5s"`: seconds, up to nine decimals, an `s`) or is negative.
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
        let delay = info
            .get("retryDelay")
            .and_then(Value::as_str)
            .and_then(parse_duration);
        Some(delay.map_or(Self::malformed(), Self::after))
    }
}

impl ServerHint {
    /// The body's word on when to retry, for a hint whose headers had none: a `Retry-After`
    /// or a reset header the server sent beside it wins.
    pub(crate) fn or_retry_info(self, info: Option<RetryInfo>) -> Self {
        match info.map(|info| info.hint()) {
            Some(RetryAfterHint::Delay(delay)) if self.retry_after().is_none() => {
                self.with_retry_after(Some(delay))
            }
            Some(RetryAfterHint::Malformed) => self.with_malformed(true),
            _ => self,
        }
    }
}

/// The `RetryInfo` of a whole response body read by
/// [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer), when its `Content-Type` says JSON
/// (`application/json`, `application/problem+json`); none without the feature `json`.
pub(crate) fn of_json_response(headers: &HeaderMap, body: &[u8]) -> Option<RetryInfo> {
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| {
            let essence = essence.trim().to_ascii_lowercase();
            essence == "application/json" || essence.ends_with("+json")
        });
    #[cfg(feature = "json")]
    return json.then(|| RetryInfo::from_json(body)).flatten();
    #[cfg(not(feature = "json"))]
    {
        let _ = (json, body);
        None
    }
}

/// A protobuf JSON `Duration` that is not negative: `"3s"`, `"1.5s"`, `"0.000000001s"`.
#[cfg(feature = "json")]
fn parse_duration(text: &str) -> Option<Duration> {
    let number = text.strip_suffix('s')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (seconds, nanos) = match number.split_once('.') {
        None => (number, 0),
        Some((seconds, fraction)) if digits(fraction) && fraction.len() <= 9 => {
            (seconds, format!("{fraction:0<9}").parse().ok()?)
        }
        Some(_) => return None,
    };
    if !digits(seconds) {
        return None;
    }
    Some(Duration::new(seconds.parse().ok()?, nanos))
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
        assert_eq!(delay(&missing), Some(RetryAfterHint::Malformed));
    }

    #[test]
    fn durations_by_the_protobuf_json_mapping() {
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        assert_eq!(parse_duration("3.000000001s"), Some(Duration::new(3, 1)));
        assert_eq!(parse_duration("0.25s"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1e3s"), None);
        assert_eq!(parse_duration("+1s"), None);
    }
}
