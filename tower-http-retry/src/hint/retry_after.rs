//! `Retry-After`: delta-seconds and the three HTTP-date forms, measured against a reference time.

use super::{decimal, reference_time, trim_ows};
use http::header::{HeaderMap, RETRY_AFTER};
use std::time::{Duration, SystemTime};

/// What a response's `Retry-After` header said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfterHint {
    /// No `Retry-After` header.
    Absent,
    /// A valid hint: wait this long (zero for a date in the past).
    Delay(Duration),
    /// A header that is neither delta-seconds nor an HTTP-date, or several headers that disagree.
    Malformed,
}

/// Reads the `Retry-After` header(s) of a response.
///
/// Accepts delta-seconds (`120`; absurdly large values saturate rather than fail, the clamp deals
/// with them), the three HTTP-date forms of RFC 9110 (IMF-fixdate, RFC 850, asctime) and the
/// lenient dates urllib3 reads too (`Mon, 3 Jun 2019 12:00:00 UTC`: a one-digit day; `UTC`,
/// `UT`, `Z` or a numeric offset for the zone; the weekday optional, and right when present),
/// measured
/// against `now` when it agrees with the response's `Date` header within the second `Date` is
/// rounded to, else against the `Date` (so that a client whose clock is off waits what the server
/// meant, up to 1 s late), and against `now` when there is no valid `Date`. Negative numbers,
/// fractions, trailing garbage and several headers with different values are
/// [`Malformed`](RetryAfterHint::Malformed).
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use tower_http_retry::hint::{parse_retry_after, RetryAfterHint};
///
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_770); // Sun, 06 Nov 1994 08:49:30 GMT
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"));
/// assert_eq!(parse_retry_after(&headers, now), RetryAfterHint::Delay(Duration::from_secs(7)));
///
/// headers.insert("retry-after", HeaderValue::from_static("-1"));
/// assert_eq!(parse_retry_after(&headers, now), RetryAfterHint::Malformed);
/// ```
pub fn parse_retry_after(headers: &HeaderMap, now: SystemTime) -> RetryAfterHint {
    let now = reference_time(headers, now);
    let mut values = headers.get_all(RETRY_AFTER).iter();
    let Some(first) = values.next() else {
        return RetryAfterHint::Absent;
    };
    let Some(delay) = parse_value(first.as_bytes(), now) else {
        return RetryAfterHint::Malformed;
    };
    // Retry-After is a singleton field; repeated copies are fine only if they agree.
    for other in values {
        if parse_value(other.as_bytes(), now) != Some(delay) {
            return RetryAfterHint::Malformed;
        }
    }
    RetryAfterHint::Delay(delay)
}

/// Parses one field value; `None` when it is not valid.
fn parse_value(raw: &[u8], now: SystemTime) -> Option<Duration> {
    let value = trim_ows(raw);
    if value.is_empty() {
        return None;
    }
    if let Some(seconds) = decimal(value) {
        return Some(Duration::from_secs(seconds));
    }
    let text = std::str::from_utf8(value).ok()?;
    let date = super::date::parse(text)?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;
    use std::time::UNIX_EPOCH;

    /// Sun, 06 Nov 1994 08:49:37 GMT, the example date of RFC 9110.
    const EXAMPLE: u64 = 784_111_777;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn hint(values: &[&[u8]], now: SystemTime) -> RetryAfterHint {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(RETRY_AFTER, HeaderValue::from_bytes(value).unwrap());
        }
        parse_retry_after(&headers, now)
    }

    fn secs(s: u64) -> RetryAfterHint {
        RetryAfterHint::Delay(Duration::from_secs(s))
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(hint(&[b"120"], at(0)), secs(120));
        assert_eq!(hint(&[b"0"], at(0)), secs(0));
        assert_eq!(hint(&[b" \t5 "], at(0)), secs(5));
    }

    #[test]
    fn huge_delta_seconds_saturate_instead_of_failing() {
        assert_eq!(hint(&[b"99999999999999999999"], at(0)), secs(u64::MAX));
    }

    #[test]
    fn all_three_http_date_forms() {
        let now = at(EXAMPLE - 30);
        assert_eq!(hint(&[b"Sun, 06 Nov 1994 08:49:37 GMT"], now), secs(30));
        assert_eq!(hint(&[b"Sunday, 06-Nov-94 08:49:37 GMT"], now), secs(30));
        assert_eq!(hint(&[b"Sun Nov  6 08:49:37 1994"], now), secs(30));
    }

    #[test]
    fn a_past_date_means_now() {
        assert_eq!(
            hint(&[b"Sun, 06 Nov 1994 08:49:37 GMT"], at(EXAMPLE + 99)),
            secs(0)
        );
    }

    #[test]
    fn garbage_is_malformed() {
        for bad in [
            &b"-1"[..],
            b"1.5",
            b"+5",
            b"5s",
            b"",
            b"   ",
            b"tomorrow",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"\xff\xfe",
        ] {
            assert_eq!(hint(&[bad], at(0)), RetryAfterHint::Malformed, "{bad:?}");
        }
    }

    #[test]
    fn repeated_headers_must_agree() {
        assert_eq!(hint(&[b"5", b"5"], at(0)), secs(5));
        assert_eq!(hint(&[b"5", b"6"], at(0)), RetryAfterHint::Malformed);
        assert_eq!(hint(&[b"5", b"x"], at(0)), RetryAfterHint::Malformed);
    }

    #[test]
    fn absent_header() {
        assert_eq!(hint(&[], at(0)), RetryAfterHint::Absent);
    }

    proptest! {
        #[test]
        fn parser_never_panics_on_any_bytes(raw in proptest::collection::vec(any::<u8>(), 0..64), now in any::<u32>()) {
            if let Ok(value) = HeaderValue::from_bytes(&raw) {
                let mut headers = HeaderMap::new();
                headers.insert(RETRY_AFTER, value);
                let _ = parse_retry_after(&headers, at(u64::from(now)));
            }
        }

        #[test]
        fn any_numeric_text_parses_or_is_malformed(text in "[ \t]{0,2}[-+]?[0-9]{0,25}(\\.[0-9]{1,3})?[ \t]{0,2}") {
            let value = HeaderValue::from_str(&text).unwrap();
            let mut headers = HeaderMap::new();
            headers.insert(RETRY_AFTER, value);
            let parsed = parse_retry_after(&headers, at(0));
            let trimmed = text.trim();
            let plain_digits = !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit());
            prop_assert_eq!(matches!(parsed, RetryAfterHint::Delay(_)), plain_digits);
        }

    }
}
