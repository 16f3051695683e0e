//! The per-attempt metadata: `grpc-timeout` read and rewritten, `grpc-previous-rpc-attempts`
//! stamped. The retry layer calls it through its attempt hook ([`GrpcMetadata`]):
//! [`request_timeout`] when a request arrives and [`stamp_attempt`] before each attempt.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;
use tower_http_retry::retry::AttemptHook;

/// gRPC's per-attempt metadata, as the retry layer's
/// [attempt hook](tower_http_retry::retry::RetryLayerBuilder::attempt_hook): stamps each retry
/// with `grpc-previous-rpc-attempts` (the number of attempts before it), and treats a request's
/// `grpc-timeout` as its deadline from the call: every attempt carries the time left instead,
/// and no retry is started past it (the request stops with
/// [`StopReason::Deadline`](tower_http_retry::StopReason::Deadline)). The layer's own
/// [`deadline`](tower_http_retry::retry::RetryLayerBuilder::deadline), if shorter, still bounds
/// the request. Set in [`layer`](crate::layer) and [`builder`](crate::builder).
///
/// ```
/// use tower_http_retry::RetryLayer;
/// use tower_http_retry_grpc::GrpcMetadata;
///
/// let layer = RetryLayer::builder().attempt_hook(GrpcMetadata).build().unwrap();
/// # let _ = layer;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcMetadata;

impl AttemptHook for GrpcMetadata {
    fn own_deadline(&self, headers: &HeaderMap) -> Option<Duration> {
        request_timeout(headers)
    }

    fn stamp(&self, headers: &mut HeaderMap, attempt: u32, own_left: Option<Duration>) {
        stamp_attempt(headers, attempt, own_left);
    }
}

/// The request's deadline, relative to when it was sent.
pub(crate) static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// How many attempts came before this one (A6); absent on the first.
pub(crate) static GRPC_PREVIOUS_RPC_ATTEMPTS: HeaderName =
    HeaderName::from_static("grpc-previous-rpc-attempts");

/// The largest value the 8 digits of a `grpc-timeout` hold.
const MAX_VALUE: u64 = 99_999_999;

/// Reads a `grpc-timeout` value: 1 to 8 ASCII digits and a unit, `H`, `M`, `S`, `m` (milli),
/// `u` (micro) or `n` (nano). Anything else is `None`.
pub(crate) fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    // At most 8 digits: the amount fits a u64 whatever the unit's factor.
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Writes `timeout` as a `grpc-timeout` value in the finest unit whose amount fits 8 digits,
/// rounded down: an attempt is never told it has more time than is left.
pub(crate) fn format_grpc_timeout(timeout: Duration) -> HeaderValue {
    let nanos = timeout.as_nanos();
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    let (amount, unit) = units
        .into_iter()
        .map(|(per, unit)| (nanos / per, unit))
        .find(|&(amount, _)| amount <= u128::from(MAX_VALUE))
        // Past 99,999,999 hours (11,000 years): the largest value there is.
        .unwrap_or((u128::from(MAX_VALUE), 'H'));
    HeaderValue::try_from(format!("{amount}{unit}")).expect("digits and a letter")
}

/// The deadline a request's `grpc-timeout` sets, if it has exactly one valid value.
pub(crate) fn request_timeout(headers: &HeaderMap) -> Option<Duration> {
    let mut values = headers.get_all(&GRPC_TIMEOUT).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    parse_grpc_timeout(value.as_bytes())
}

/// Stamps attempt number `attempt` (1 for the first) of a request: the count of previous
/// attempts on a retry, and the time `left` of its deadline, if it has one.
pub(crate) fn stamp_attempt(headers: &mut HeaderMap, attempt: u32, left: Option<Duration>) {
    if attempt > 1 {
        headers.insert(
            GRPC_PREVIOUS_RPC_ATTEMPTS.clone(),
            HeaderValue::from(attempt - 1),
        );
    }
    if let Some(left) = left {
        headers.insert(GRPC_TIMEOUT.clone(), format_grpc_timeout(left));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_is_read() {
        let cases: [(&[u8], Duration); 7] = [
            (b"2H", Duration::from_secs(7200)),
            (b"3M", Duration::from_secs(180)),
            (b"5S", Duration::from_secs(5)),
            (b"250m", Duration::from_millis(250)),
            (b"7u", Duration::from_micros(7)),
            (b"99999999n", Duration::from_nanos(99_999_999)),
            (b"0S", Duration::ZERO),
        ];
        for (value, expected) in cases {
            assert_eq!(parse_grpc_timeout(value), Some(expected));
        }
    }

    #[test]
    fn malformed_timeouts_are_not_read() {
        let bad: [&[u8]; 9] = [
            b"",
            b"S",
            b"100",
            b"123456789S",
            b"1.5S",
            b"-1S",
            b"10s",
            b" 1S",
            b"1 S",
        ];
        for value in bad {
            assert_eq!(parse_grpc_timeout(value), None, "{value:?}");
        }
    }

    #[test]
    fn a_timeout_is_written_in_the_finest_unit_that_fits_eight_digits() {
        let cases = [
            (Duration::ZERO, "0n"),
            (Duration::from_nanos(99_999_999), "99999999n"),
            (Duration::from_millis(100), "100000u"),
            (Duration::from_millis(4_999), "4999000u"),
            (Duration::from_secs(5), "5000000u"),
            (Duration::from_secs(500), "500000m"),
            (Duration::from_secs(99_999_999), "99999999S"),
            (Duration::from_secs(100_000_000), "1666666M"),
            (Duration::from_secs(6_000_000_000), "1666666H"),
            (Duration::MAX, "99999999H"),
        ];
        for (timeout, expected) in cases {
            assert_eq!(format_grpc_timeout(timeout), expected, "{timeout:?}");
        }
    }

    #[test]
    fn a_written_timeout_reads_back_at_most_what_was_left() {
        for nanos in [1u64, 999, 123_456_789, 4_999_999_999, 86_400_000_000_123] {
            let left = Duration::from_nanos(nanos);
            let written = format_grpc_timeout(left);
            let read = parse_grpc_timeout(written.as_bytes()).unwrap();
            assert!(read <= left, "{left:?} became {read:?}");
            // A coarser unit is chosen only when the amount reaches 10^5 (a step of 1000) or
            // more, so less than one unit is lost: under 1/10^5 of the value.
            assert!(left - read <= left / 100_000, "{left:?} became {read:?}");
        }
    }

    #[test]
    fn retries_carry_the_previous_attempts_and_the_time_left() {
        let mut headers = HeaderMap::new();
        stamp_attempt(&mut headers, 1, None);
        assert!(headers.is_empty());
        headers.insert(GRPC_TIMEOUT.clone(), HeaderValue::from_static("1S"));
        stamp_attempt(&mut headers, 3, Some(Duration::from_millis(400)));
        assert_eq!(headers[&GRPC_PREVIOUS_RPC_ATTEMPTS], "2");
        assert_eq!(headers[&GRPC_TIMEOUT], "400000u");
    }

    #[test]
    fn a_request_with_two_timeouts_has_no_deadline() {
        let mut headers = HeaderMap::new();
        headers.append(GRPC_TIMEOUT.clone(), HeaderValue::from_static("1S"));
        assert_eq!(request_timeout(&headers), Some(Duration::from_secs(1)));
        headers.append(GRPC_TIMEOUT.clone(), HeaderValue::from_static("2S"));
        assert_eq!(request_timeout(&headers), None);
    }
}
