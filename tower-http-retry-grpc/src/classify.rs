//! [`GrpcClassifier`]: the gRPC retry rules (proposal A6, AIP-194) read from a response's
//! headers.

use super::code::GrpcCode;
use crate::retry_info::{retry_info, Details};
use http::header::{HeaderMap, HeaderName};
use http::StatusCode;
use std::time::{Duration, SystemTime};
use tower_http_retry::classify::{AsStdError, Ask, Classify, HttpClassifier, Outcome, Signals};
use tower_http_retry::hint::ServerHint;

/// The status of a call that ended before any message: present in the *headers* only of a
/// Trailers-Only response.
pub(crate) static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The server's pushback (A6): milliseconds to wait before the retry, or negative for none.
pub(crate) static GRPC_RETRY_PUSHBACK_MS: HeaderName =
    HeaderName::from_static("grpc-retry-pushback-ms");

/// Classifies gRPC calls by the gRPC rules (gRPC proposal A6, Google AIP-194), from the response
/// headers alone: the library depends on no gRPC stack.
///
/// | response | classified as |
/// |---|---|
/// | HTTP 200, no `grpc-status` in the headers | success: the call is **committed** (its status comes in the trailers, after the messages) and is passed through, never retried |
/// | `grpc-status` in the headers (a Trailers-Only response) with a [retryable code](Self::retryable_codes), UNAVAILABLE by default | transient |
/// | RESOURCE_EXHAUSTED with a valid `grpc-retry-pushback-ms` (0 or more), or a `google.rpc.RetryInfo` in `grpc-status-details-bin` | transient ([switchable](Self::resource_exhausted_with_pushback)) |
/// | `grpc-status` 0 (OK) | success |
/// | any other `grpc-status` (CANCELLED, DEADLINE_EXCEEDED, INVALID_ARGUMENT, DATA_LOSS, ...; a malformed one reads as INTERNAL) | permanent |
/// | HTTP status other than 200 without `grpc-status` | the code gRPC maps it to ([`GrpcCode::of_http_status`]: 429, 502, 503, 504 → UNAVAILABLE, so transient), then as above |
/// | an error of the inner service (transport) | as [`HttpClassifier`] classifies it (connection refused: [not sent](tower_http_retry::classify::NotSent); reset, timeout: transient), or the table set with [`errors`](Self::errors) |
///
/// Its [`signals`](Classify::signals)' hint reads `grpc-retry-pushback-ms`: a valid value replaces the
/// backoff delay (clamped like `Retry-After`); a negative or malformed one means "do not
/// retry" ([`ServerHint::stand_down`], the request stops with
/// [`StopReason::StandDown`](tower_http_retry::StopReason::StandDown)). Without the header, a
/// `google.rpc.RetryInfo` among the details of the call's rich status
/// (`grpc-status-details-bin`, as Google's APIs send it, AIP-194) gives the delay; a rich status
/// that cannot be read is ignored and counted as malformed. Without either, a `Retry-After`
/// (from a proxy's 429 or 503) is read as usual.
///
/// ```
/// use http::Method;
/// use tower_http_retry::Outcome;
/// use tower_http_retry::classify::Classify;
/// use tower_http_retry_grpc::{GrpcClassifier, GrpcCode};
///
/// let trailers_only = |code: &str| -> Result<http::Response<()>, std::io::Error> {
///     Ok(http::Response::builder().header("grpc-status", code).body(()).unwrap())
/// };
/// let classifier = GrpcClassifier::new();
/// assert_eq!(classifier.classify(&Method::POST, &trailers_only("14")), Outcome::Transient);
/// assert_eq!(classifier.classify(&Method::POST, &trailers_only("4")), Outcome::Permanent);
/// // Committed: headers without a status.
/// let committed: Result<_, std::io::Error> = Ok(http::Response::new(()));
/// assert_eq!(classifier.classify(&Method::POST, &committed), Outcome::Success);
///
/// let aborts_too = GrpcClassifier::new().retryable_codes([GrpcCode::Unavailable, GrpcCode::Aborted]);
/// assert_eq!(aborts_too.classify(&Method::POST, &trailers_only("10")), Outcome::Transient);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct GrpcClassifier {
    /// One bit per code: set when retryable.
    retryable: u32,
    resource_exhausted_with_pushback: bool,
    errors: HttpClassifier,
}

impl GrpcClassifier {
    /// UNAVAILABLE retryable, RESOURCE_EXHAUSTED with pushback too, transport errors as
    /// [`HttpClassifier::new`] classifies them.
    pub fn new() -> Self {
        Self {
            retryable: GrpcCode::Unavailable.bit(),
            resource_exhausted_with_pushback: true,
            errors: HttpClassifier::new(),
        }
    }

    /// Sets the retryable codes, replacing the default (UNAVAILABLE): A6's
    /// `retryableStatusCodes`. OK is never retried, even if named.
    pub fn retryable_codes(mut self, codes: impl IntoIterator<Item = GrpcCode>) -> Self {
        self.retryable = codes
            .into_iter()
            .filter(|&code| code != GrpcCode::Ok)
            .fold(0, |set, code| set | code.bit());
        self
    }

    /// Sets whether RESOURCE_EXHAUSTED is retried when the server sends a valid pushback,
    /// although it is not among the retryable codes (AIP-194: only the server knows whether its
    /// quota comes back soon; on by default). Off, RESOURCE_EXHAUSTED follows
    /// [`retryable_codes`](Self::retryable_codes) alone, as in A6.
    pub fn resource_exhausted_with_pushback(mut self, on: bool) -> Self {
        self.resource_exhausted_with_pushback = on;
        self
    }

    /// Sets the table for errors of the inner service (transport errors).
    pub fn errors(mut self, errors: HttpClassifier) -> Self {
        self.errors = errors;
        self
    }

    /// Whether `code` is among the retryable codes.
    pub fn is_retryable(&self, code: GrpcCode) -> bool {
        self.retryable & code.bit() != 0
    }

    /// The retryable codes, in numeric order.
    pub fn retryable(&self) -> impl Iterator<Item = GrpcCode> + '_ {
        GrpcCode::ALL
            .into_iter()
            .filter(|&code| self.is_retryable(code))
    }

    /// The status a response's headers give the call: `None` when it is committed (HTTP 200
    /// without `grpc-status`: the status comes in the trailers).
    pub fn status_of(status: StatusCode, headers: &HeaderMap) -> Option<GrpcCode> {
        match headers.get(&GRPC_STATUS) {
            Some(value) => Some(
                std::str::from_utf8(value.as_bytes())
                    .ok()
                    .and_then(|text| text.trim().parse::<i32>().ok())
                    // grpc-go's reading of a status that is not a number.
                    .map_or(GrpcCode::Internal, GrpcCode::from_i32),
            ),
            None if status == StatusCode::OK => None,
            None => Some(GrpcCode::of_http_status(status)),
        }
    }

    /// Classifies a call that ended with `code`; `pushback` is the server's
    /// `grpc-retry-pushback-ms` as [`pushback`](Self::pushback) reads it.
    pub fn classify_code(&self, code: GrpcCode, pushback: Option<Pushback>) -> Outcome {
        match code {
            GrpcCode::Ok => Outcome::Success,
            code if self.is_retryable(code) => Outcome::Transient,
            GrpcCode::ResourceExhausted
                if self.resource_exhausted_with_pushback
                    && matches!(pushback, Some(Pushback::After(_))) =>
            {
                Outcome::Transient
            }
            _ => Outcome::Permanent,
        }
    }

    /// Reads `grpc-retry-pushback-ms`: `None` without it.
    pub fn pushback(headers: &HeaderMap) -> Option<Pushback> {
        let mut values = headers.get_all(&GRPC_RETRY_PUSHBACK_MS).iter();
        let value = values.next()?;
        if values.next().is_some() {
            return Some(Pushback::DoNotRetry);
        }
        // A header value holds no ASCII whitespace but spaces and tabs: the optional
        // whitespace around it.
        let digits = value.as_bytes().trim_ascii();
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            // Negative, or not a number: A6 says do not retry.
            return Some(Pushback::DoNotRetry);
        }
        // Digits only; a value past u64 is as long as can be, and the clamp decides.
        let millis = digits.iter().try_fold(0u64, |sum, digit| {
            sum.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
        });
        Some(Pushback::After(
            millis.map_or(Duration::MAX, Duration::from_millis),
        ))
    }
}

impl Default for GrpcClassifier {
    fn default() -> Self {
        Self::new()
    }
}

/// The server's `grpc-retry-pushback-ms`, read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pushback {
    /// Retry after this long (0 or more milliseconds).
    After(Duration),
    /// Do not retry: the value was negative, malformed, or sent twice.
    DoNotRetry,
}

impl<B, E: AsStdError> Classify<http::Response<B>, E> for GrpcClassifier {
    fn classify_response(&self, response: &http::Response<B>) -> Outcome {
        let headers = response.headers();
        match Self::status_of(response.status(), headers) {
            None => Outcome::Success,
            Some(code) => {
                // A `RetryInfo` says "retry after" as a pushback does (AIP-194).
                let pushback = Self::pushback(headers).or_else(|| match retry_info(headers) {
                    Details::RetryAfter(delay) => Some(Pushback::After(delay)),
                    _ => None,
                });
                self.classify_code(code, pushback)
            }
        }
    }

    fn classify_error(&self, error: &E) -> Outcome {
        <HttpClassifier as Classify<http::Response<B>, E>>::classify_error(&self.errors, error)
    }

    /// Errors as for HTTP: transport errors are the channel's, whatever the protocol above them
    /// (a `GOAWAY` tonic's channel delivered is a rotation without proof, as hyper's is).
    /// Responses: UNAVAILABLE and RESOURCE_EXHAUSTED (in a Trailers-Only response, or mapped
    /// from a proxy's HTTP status) are congestion, any other code is not; the hint is the
    /// server's pushback, else its `google.rpc.RetryInfo`, else a proxy's `Retry-After`.
    fn signals(&self, result: &Result<http::Response<B>, E>, ask: &Ask<'_>) -> Signals {
        let response = match result {
            Err(_) => return self.errors.signals(result, ask),
            Ok(response) if ask.outcome == Outcome::Success && !ask.quota => {
                return Signals::default()
            }
            Ok(response) => response,
        };
        let mut signals = Signals::default();
        signals.hint = self.hint(response, (ask.now)());
        signals.congestion = ask.outcome == Outcome::Transient
            && match response.headers().get(&GRPC_STATUS) {
                Some(_) => matches!(
                    Self::status_of(response.status(), response.headers()),
                    Some(GrpcCode::Unavailable | GrpcCode::ResourceExhausted)
                ),
                // A proxy's answer: the pacing configuration's statuses decide, as for HTTP.
                None => ask.congestion.contains(&response.status()),
            };
        signals
    }
}

impl GrpcClassifier {
    /// What a response says of retrying it: the server's pushback, else its
    /// `google.rpc.RetryInfo` (in a call that failed with a status), else a proxy's
    /// `Retry-After` on a 4xx or 5xx.
    fn hint<B>(&self, response: &http::Response<B>, now: SystemTime) -> ServerHint {
        match Self::pushback(response.headers()) {
            Some(Pushback::After(delay)) => return ServerHint::after(delay),
            Some(Pushback::DoNotRetry) => return ServerHint::stand_down(),
            None => {}
        }
        let details = match response.headers().get(&GRPC_STATUS) {
            Some(_) => retry_info(response.headers()),
            None => Details::Absent,
        };
        let hint = match details {
            Details::RetryAfter(delay) => return ServerHint::after(delay),
            // A proxy's 429 or 503; a `Retry-After` on a 200 asks for nothing.
            _ if response.status().is_client_error() || response.status().is_server_error() => {
                ServerHint::of_retry_after(response.headers(), now)
            }
            _ => ServerHint::NONE,
        };
        hint.with_malformed(hint.is_malformed() || details == Details::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use std::io;
    use tower_http_retry::classify::NotSent;

    fn response(status: u16, headers: &[(&str, &str)]) -> http::Response<()> {
        let mut builder = http::Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    fn classify(classifier: &GrpcClassifier, response: http::Response<()>) -> Outcome {
        classifier.classify(&Method::POST, &Ok::<_, io::Error>(response))
    }

    fn hint(response: http::Response<()>) -> ServerHint {
        GrpcClassifier::new().hint(&response, SystemTime::now())
    }

    #[test]
    fn a_retry_info_in_the_rich_status_is_the_delay_and_makes_resource_exhausted_retryable() {
        use crate::retry_info::tests::{details_bin, retry_info_of};
        let info = details_bin(vec![(
            "type.googleapis.com/google.rpc.RetryInfo",
            retry_info_of(37, 0),
        )]);
        let info = info.to_str().unwrap().to_owned();
        let with_details = |code: &str, pushback: Option<&str>| {
            let mut headers = vec![("grpc-status", code), ("grpc-status-details-bin", &info)];
            if let Some(ms) = pushback {
                headers.push(("grpc-retry-pushback-ms", ms));
            }
            response(200, &headers)
        };
        assert_eq!(
            hint(with_details("8", None)),
            ServerHint::after(Duration::from_secs(37))
        );
        let classifier = GrpcClassifier::new();
        assert_eq!(
            classify(&classifier, with_details("8", None)),
            Outcome::Transient
        );
        let exhausted = response(200, &[("grpc-status", "8")]);
        assert_eq!(classify(&classifier, exhausted), Outcome::Permanent);
        // The pushback header wins (A6).
        assert_eq!(
            hint(with_details("14", Some("250"))),
            ServerHint::after(Duration::from_millis(250))
        );
        // A rich status that is not one: counted as malformed, the call classified by its code.
        let broken = response(
            200,
            &[("grpc-status", "14"), ("grpc-status-details-bin", "!!")],
        );
        assert!(hint(broken).is_malformed());
    }

    #[test]
    fn an_unknown_transport_error_is_named_as_for_http() {
        let unknown = Err::<http::Response<()>, _>(io::Error::other("a kind no rule names"));
        let ask = Ask::new(Outcome::Transient, &SystemTime::now);
        let named = GrpcClassifier::new().signals(&unknown, &ask).unknown_error;
        let http = HttpClassifier::new().signals(&unknown, &ask).unknown_error;
        assert!(named.is_some(), "the gRPC classifier names it");
        assert_eq!(named, http);
    }

    #[test]
    fn unavailable_and_resource_exhausted_are_congestion_and_a_proxy_status_reads_the_list() {
        let congestion = |response: http::Response<()>| {
            let ask = Ask::new(Outcome::Transient, &SystemTime::now)
                .congestion(&[StatusCode::SERVICE_UNAVAILABLE]);
            GrpcClassifier::new()
                .signals(&Ok::<_, io::Error>(response), &ask)
                .congestion
        };
        assert!(congestion(response(200, &[("grpc-status", "14")])));
        assert!(congestion(response(200, &[("grpc-status", "8")])));
        assert!(!congestion(response(200, &[("grpc-status", "10")])));
        assert!(congestion(response(503, &[])));
        assert!(!congestion(response(429, &[])), "not in the list given");
    }

    #[test]
    fn the_default_table_retries_unavailable_alone() {
        let classifier = GrpcClassifier::new();
        for code in GrpcCode::ALL {
            let status = code.as_i32().to_string();
            let outcome = classify(&classifier, response(200, &[("grpc-status", &status)]));
            let expected = match code {
                GrpcCode::Ok => Outcome::Success,
                GrpcCode::Unavailable => Outcome::Transient,
                _ => Outcome::Permanent,
            };
            assert_eq!(outcome, expected, "{code}");
        }
    }

    #[test]
    fn headers_without_a_status_are_committed() {
        let classifier = GrpcClassifier::new();
        assert_eq!(classify(&classifier, response(200, &[])), Outcome::Success);
        // Even when a pushback rides along: the call is committed.
        let pushback = response(200, &[("grpc-retry-pushback-ms", "10")]);
        assert_eq!(classify(&classifier, pushback), Outcome::Success);
    }

    #[test]
    fn resource_exhausted_is_transient_only_with_a_valid_pushback() {
        let classifier = GrpcClassifier::new();
        let exhausted = |pushback: Option<&str>| {
            let mut headers = vec![("grpc-status", "8")];
            headers.extend(pushback.map(|ms| ("grpc-retry-pushback-ms", ms)));
            response(200, &headers)
        };
        assert_eq!(classify(&classifier, exhausted(None)), Outcome::Permanent);
        assert_eq!(
            classify(&classifier, exhausted(Some("250"))),
            Outcome::Transient
        );
        assert_eq!(
            classify(&classifier, exhausted(Some("0"))),
            Outcome::Transient
        );
        for bad in ["-1", "soon", "", "1.5"] {
            assert_eq!(
                classify(&classifier, exhausted(Some(bad))),
                Outcome::Permanent,
                "{bad:?}"
            );
        }
        let a6 = GrpcClassifier::new().resource_exhausted_with_pushback(false);
        assert_eq!(classify(&a6, exhausted(Some("250"))), Outcome::Permanent);
    }

    #[test]
    fn non_200_statuses_without_grpc_status_map_as_grpc_maps_them() {
        let classifier = GrpcClassifier::new();
        for (status, expected) in [
            (429, Outcome::Transient),
            (502, Outcome::Transient),
            (503, Outcome::Transient),
            (504, Outcome::Transient),
            (400, Outcome::Permanent),
            (401, Outcome::Permanent),
            (403, Outcome::Permanent),
            (404, Outcome::Permanent),
            (500, Outcome::Permanent),
        ] {
            assert_eq!(
                classify(&classifier, response(status, &[])),
                expected,
                "{status}"
            );
        }
        // A status in the headers wins over the HTTP status.
        let both = response(503, &[("grpc-status", "3")]);
        assert_eq!(classify(&classifier, both), Outcome::Permanent);
    }

    #[test]
    fn a_malformed_status_is_internal_and_an_unknown_number_unknown() {
        assert_eq!(
            GrpcClassifier::status_of(
                StatusCode::OK,
                response(200, &[("grpc-status", "x")]).headers()
            ),
            Some(GrpcCode::Internal)
        );
        assert_eq!(
            GrpcClassifier::status_of(
                StatusCode::OK,
                response(200, &[("grpc-status", "42")]).headers()
            ),
            Some(GrpcCode::Unknown)
        );
    }

    #[test]
    fn retryable_codes_replace_the_default() {
        let classifier = GrpcClassifier::new().retryable_codes([GrpcCode::Aborted, GrpcCode::Ok]);
        assert_eq!(
            classifier.retryable().collect::<Vec<_>>(),
            [GrpcCode::Aborted]
        );
        let unavailable = response(200, &[("grpc-status", "14")]);
        assert_eq!(classify(&classifier, unavailable), Outcome::Permanent);
        let aborted = response(200, &[("grpc-status", "10")]);
        assert_eq!(classify(&classifier, aborted), Outcome::Transient);
    }

    #[test]
    fn a_pushback_is_the_delay_and_a_negative_or_malformed_one_stands_down() {
        let with = |ms: &str| {
            response(
                200,
                &[("grpc-status", "14"), ("grpc-retry-pushback-ms", ms)],
            )
        };
        assert_eq!(
            hint(with("1500")),
            ServerHint::after(Duration::from_millis(1500))
        );
        assert_eq!(
            hint(with(" 20 ")),
            ServerHint::after(Duration::from_millis(20))
        );
        assert_eq!(
            hint(with("99999999999999999999999")),
            ServerHint::after(Duration::MAX)
        );
        for bad in ["-1", "-1000", "1e3", "abc", "+5"] {
            assert_eq!(hint(with(bad)), ServerHint::stand_down(), "{bad:?}");
        }
        let twice = response(
            200,
            &[
                ("grpc-retry-pushback-ms", "10"),
                ("grpc-retry-pushback-ms", "20"),
            ],
        );
        assert_eq!(hint(twice), ServerHint::stand_down());
    }

    #[test]
    fn without_a_pushback_retry_after_is_read() {
        let proxy = response(503, &[("retry-after", "3")]);
        assert_eq!(hint(proxy), ServerHint::after(Duration::from_secs(3)));
        assert_eq!(
            hint(response(200, &[("grpc-status", "14")])),
            ServerHint::NONE
        );
    }

    #[test]
    fn transport_errors_classify_as_the_http_table_does() {
        let classifier = GrpcClassifier::new();
        let refused: Result<http::Response<()>, io::Error> =
            Err(io::ErrorKind::ConnectionRefused.into());
        assert_eq!(
            classifier.classify(&Method::POST, &refused),
            Outcome::NotSent(NotSent::Unconnected)
        );
        let reset: Result<http::Response<()>, io::Error> =
            Err(io::ErrorKind::ConnectionReset.into());
        assert_eq!(
            classifier.classify(&Method::POST, &reset),
            Outcome::Transient
        );
    }
}
