//! Per-attempt request metadata, in one place: the attempt header, the `Idempotency-Key`
//! stamped once, and whatever a protocol adds through an [`AttemptHook`] (the gRPC module's
//! `grpc-timeout` and `grpc-previous-rpc-attempts`). The retry core knows the hook, never the
//! protocol: the dependency goes from the protocol to the core.

use super::config::Settings;
use super::idempotency::{is_idempotent, Idempotency};
use http::{HeaderMap, HeaderValue, Method};
use rand::rngs::SmallRng;
use rand::RngExt;
use std::fmt;
use std::time::Duration;

/// What a protocol reads from a request when it arrives and writes on each attempt.
pub(crate) trait AttemptHook: Send + Sync + 'static {
    /// The request's own deadline, counted from the call (read once, when it arrives).
    fn own_deadline(&self, headers: &HeaderMap) -> Option<Duration>;

    /// Stamps the `attempt`-th attempt (1-based); `own_left` is what is left of the request's
    /// own deadline.
    fn stamp(&self, headers: &mut HeaderMap, attempt: u32, own_left: Option<Duration>);
}

impl fmt::Debug for dyn AttemptHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AttemptHook")
    }
}

/// Stamps a new request's `Idempotency-Key` when configured and the request needs one (not
/// idempotent, none of its own); returns the random stream the key was drawn from, kept for
/// the request's later draws.
#[inline]
pub(crate) fn stamp_key(
    settings: &Settings,
    method: &Method,
    headers: &mut HeaderMap,
) -> Option<SmallRng> {
    // Checked inline, in the caller: off, the call of every request pays one load for it.
    if !settings.stamp_idempotency_key {
        return None;
    }
    stamp_new_key(settings, method, headers)
}

fn stamp_new_key(
    settings: &Settings,
    method: &Method,
    headers: &mut HeaderMap,
) -> Option<SmallRng> {
    if is_idempotent(method) || headers.contains_key(&Idempotency::KEY_HEADER) {
        return None;
    }
    let mut stream = settings.random.stream();
    let key: u128 = stream.random();
    let value =
        HeaderValue::try_from(format!("{key:032x}")).expect("hex digits are a valid header value");
    headers.insert(Idempotency::KEY_HEADER.clone(), value);
    Some(stream)
}

/// The request's own deadline, if the hook reads one.
#[inline]
pub(crate) fn own_deadline(settings: &Settings, headers: &HeaderMap) -> Option<Duration> {
    settings
        .attempt_hook
        .as_ref()
        .and_then(|hook| hook.own_deadline(headers))
}

/// Stamps the `attempt`-th attempt: the attempt header, then the hook's metadata.
#[inline]
pub(crate) fn stamp(
    settings: &Settings,
    headers: &mut HeaderMap,
    attempt: u32,
    own_left: impl FnOnce() -> Option<Duration>,
) {
    // Checked inline, in the caller: with neither, every attempt pays two loads for them.
    if settings.attempt_header.is_none() && settings.attempt_hook.is_none() {
        return;
    }
    stamp_metadata(settings, headers, attempt, own_left);
}

fn stamp_metadata(
    settings: &Settings,
    headers: &mut HeaderMap,
    attempt: u32,
    own_left: impl FnOnce() -> Option<Duration>,
) {
    if let Some(name) = &settings.attempt_header {
        headers.insert(name.clone(), HeaderValue::from(attempt));
    }
    if let Some(hook) = &settings.attempt_hook {
        hook.stamp(headers, attempt, own_left());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    struct Counting;

    impl AttemptHook for Counting {
        fn own_deadline(&self, headers: &HeaderMap) -> Option<Duration> {
            headers
                .get("x-budget-ms")
                .and_then(|value| value.to_str().ok()?.parse().ok())
                .map(Duration::from_millis)
        }

        fn stamp(&self, headers: &mut HeaderMap, attempt: u32, own_left: Option<Duration>) {
            headers.insert("x-seen", HeaderValue::from(attempt * 10));
            if let Some(left) = own_left {
                headers.insert("x-left-ms", HeaderValue::from(left.as_millis() as u64));
            }
        }
    }

    #[test]
    fn the_attempt_header_and_the_hook_stamp_each_attempt() {
        let mut settings = Settings {
            attempt_header: Some(HeaderName::from_static("x-attempt")),
            ..Settings::default()
        };
        let mut headers = HeaderMap::new();
        stamp(&settings, &mut headers, 2, || unreachable!("no hook"));
        assert_eq!(headers["x-attempt"], "2");
        settings.attempt_hook = Some(std::sync::Arc::new(Counting));
        stamp(&settings, &mut headers, 3, || {
            Some(Duration::from_millis(40))
        });
        assert_eq!(headers["x-attempt"], "3");
        assert_eq!(headers["x-seen"], "30");
        assert_eq!(headers["x-left-ms"], "40");
        headers.insert("x-budget-ms", HeaderValue::from(250));
        assert_eq!(
            own_deadline(&settings, &headers),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn a_key_is_stamped_only_on_a_request_that_needs_one() {
        let mut settings = Settings::default();
        let mut headers = HeaderMap::new();
        assert!(stamp_key(&settings, &Method::POST, &mut headers).is_none());
        settings.stamp_idempotency_key = true;
        assert!(stamp_key(&settings, &Method::GET, &mut headers).is_none());
        assert!(stamp_key(&settings, &Method::POST, &mut headers).is_some());
        let key = headers[&Idempotency::KEY_HEADER].clone();
        assert_eq!(key.len(), 32);
        // A request with its own key keeps it.
        assert!(stamp_key(&settings, &Method::POST, &mut headers).is_none());
        assert_eq!(headers[&Idempotency::KEY_HEADER], key);
    }
}
