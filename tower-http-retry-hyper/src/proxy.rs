//! What a reverse proxy answers its caller when its client stack (retry layer, circuit breaker,
//! per-attempt timeout, hyper-util's client) returned no upstream response: the status, when to
//! try again, and whether to retry on top.
//!
//! | the error (anywhere in its chain) | status | `Retry-After` |
//! |---|---|---|
//! | [`CircuitOpen`] (a breaker's, or a [pool](tower_http_retry::pool)'s whose every upstream is held) | 503 | until the circuit lets a probe through, or the first upstream may be asked again (whole seconds, at least 1) |
//! | a timeout ([`tower::timeout::error::Elapsed`]) | 504 | the retry layer's [`resend_after`](RetryReport::resend_after), if any |
//! | anything else (refused, reset, a DNS failure) | 502 | the same |
//!
//! And on every response, upstream's included ([`stand_down`]): when the retry layer has retried,
//! or held back on purpose, or the upstream asked it to, `x-should-retry: false`, so that the
//! proxy's callers do not retry on top (3 attempts per hop over 2 hops are 9 upstream calls).
//!
//! ```
//! use tower_http_retry::RetryReport;
//! use tower_http_retry_hyper::proxy;
//!
//! let error: tower::BoxError = Box::new(std::io::Error::other("connection refused"));
//! let response: http::Response<String> = proxy::error_response(&*error, &RetryReport::default());
//! assert_eq!(response.status(), 502);
//! ```

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use std::error::Error;
use std::time::Duration;
use tower::timeout::error::Elapsed;
use tower_http_retry::circuit_breaker::CircuitOpen;
use tower_http_retry::RetryReport;

/// The caller's cue not to retry (`false`), honoured by tower-http-retry and by many SDKs.
pub const SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

/// The status and the `Retry-After` (if any) for `error`, which the client stack returned
/// instead of an upstream response, and `report`, the retry layer's report of the request
/// ([`RetryReport::capture`]).
pub fn error_status(
    error: &(dyn Error + 'static),
    report: &RetryReport,
) -> (StatusCode, Option<Duration>) {
    let mut link = Some(error);
    while let Some(error) = link {
        if let Some(open) = error.downcast_ref::<CircuitOpen>() {
            return (StatusCode::SERVICE_UNAVAILABLE, Some(open.retry_after()));
        }
        if error.is::<Elapsed>() {
            return (StatusCode::GATEWAY_TIMEOUT, report.resend_after);
        }
        link = error.source();
    }
    (StatusCode::BAD_GATEWAY, report.resend_after)
}

/// The response for `error` (see [`error_status`]), with an empty body, `Retry-After` in whole
/// seconds rounded up (at least 1: a caller that waits that long finds the upstream's circuit
/// half-open), and [`stand_down`]'s header.
pub fn error_response<B: Default>(
    error: &(dyn Error + 'static),
    report: &RetryReport,
) -> Response<B> {
    let (status, retry_after) = error_status(error, report);
    let mut response = Response::new(B::default());
    *response.status_mut() = status;
    if let Some(after) = retry_after {
        let seconds = after.as_secs_f64().ceil().max(1.0) as u64;
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    stand_down(response.headers_mut(), report);
    response
}

/// Sets `x-should-retry: false` when `report` says the proxy's callers should not retry on top
/// ([`RetryReport::asks_callers_to_stand_down`]).
pub fn stand_down(headers: &mut HeaderMap, report: &RetryReport) {
    if report.asks_callers_to_stand_down() {
        headers.insert(SHOULD_RETRY, HeaderValue::from_static("false"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_http_retry::StopReason;

    #[derive(Debug)]
    struct Wrapped(Box<dyn Error + Send + Sync>);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("request failed")
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn a_timeout_is_a_504_and_a_transport_error_a_502_with_when_to_try_again() {
        let mut report = RetryReport::default();
        report.resend_after = Some(Duration::from_millis(1_200));
        report.stop = StopReason::AttemptsExhausted;
        report.attempts = 3;
        let timed_out = Wrapped(Box::new(Elapsed::new()));
        let response: Response<()> = error_response(&timed_out, &report);
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(response.headers()[RETRY_AFTER], "2");
        assert_eq!(response.headers()[SHOULD_RETRY], "false", "it retried");

        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let response: Response<()> = error_response(&refused, &RetryReport::default());
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert!(response.headers().get(RETRY_AFTER).is_none());
        assert!(response.headers().get(SHOULD_RETRY).is_none());
    }
}
