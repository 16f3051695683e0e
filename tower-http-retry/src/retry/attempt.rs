//! Per-attempt request metadata, in one place: the attempt header, the `Idempotency-Key`
//! stamped once, and whatever a protocol adds through an [`AttemptHook`] (the gRPC crate's
//! `grpc-timeout` and `grpc-previous-rpc-attempts`). The retry core knows the hook, never the
//! protocol: the dependency goes from the protocol to the core.

use super::idempotency::{is_idempotent, Idempotency};
use crate::random::RandomSource;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use rand::rngs::SmallRng;
use rand::RngExt;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What a protocol reads from a request when it arrives and writes on each attempt: set with
/// [`RetryLayerBuilder::attempt_hook`](crate::retry::RetryLayerBuilder::attempt_hook).
///
/// A request can carry its own deadline (gRPC's `grpc-timeout`): the layer reads it once, when
/// the request arrives, starts no retry past it (the request stops with
/// [`StopReason::Deadline`](crate::StopReason::Deadline)), and hands what is left of it to
/// every attempt. The layer's own [`deadline`](crate::retry::RetryLayerBuilder::deadline), if
/// shorter, still bounds the waits.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use std::time::Duration;
/// use tower_http_retry::retry::AttemptHook;
/// use tower_http_retry::RetryLayer;
///
/// /// A protocol whose requests carry their own budget in milliseconds.
/// struct BudgetMs;
///
/// impl AttemptHook for BudgetMs {
///     fn own_deadline(&self, headers: &HeaderMap) -> Option<Duration> {
///         let ms = headers.get("x-budget-ms")?.to_str().ok()?.parse().ok()?;
///         Some(Duration::from_millis(ms))
///     }
///
///     fn stamp(&self, headers: &mut HeaderMap, _attempt: u32, own_left: Option<Duration>) {
///         if let Some(left) = own_left {
///             headers.insert("x-budget-ms", HeaderValue::from(left.as_millis() as u64));
///         }
///     }
/// }
///
/// let layer = RetryLayer::builder().attempt_hook(BudgetMs).build().unwrap();
/// # let _ = layer;
/// ```
pub trait AttemptHook: Send + Sync + 'static {
    /// The request's own deadline, counted from the call (read once, when it arrives); `None`:
    /// it has none.
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

/// What the layer writes on a request's attempts, as the builder set it.
#[derive(Clone, Debug, Default)]
pub(crate) struct AttemptStamps {
    /// A header carrying the attempt's number.
    pub(crate) header: Option<HeaderName>,
    /// Whether a request that needs an `Idempotency-Key` gets one.
    pub(crate) idempotency_key: bool,
    /// A protocol's per-attempt metadata.
    pub(crate) hook: Option<Arc<dyn AttemptHook>>,
}

impl AttemptStamps {
    /// Stamps a new request's `Idempotency-Key` when configured and the request needs one (not
    /// idempotent, none of its own); returns the random stream the key was drawn from, kept for
    /// the request's later draws.
    #[inline]
    pub(crate) fn stamp_key(
        &self,
        random: &RandomSource,
        method: &Method,
        headers: &mut HeaderMap,
    ) -> Option<SmallRng> {
        // Checked inline, in the caller: off, the call of every request pays one load for it.
        if !self.idempotency_key {
            return None;
        }
        stamp_new_key(random, method, headers)
    }

    /// The request's own deadline, if the hook reads one.
    #[inline]
    pub(crate) fn own_deadline(&self, headers: &HeaderMap) -> Option<Duration> {
        self.hook
            .as_ref()
            .and_then(|hook| hook.own_deadline(headers))
    }

    /// Stamps the `attempt`-th attempt: the attempt header, then the hook's metadata.
    #[inline]
    pub(crate) fn stamp(
        &self,
        headers: &mut HeaderMap,
        attempt: u32,
        own_left: impl FnOnce() -> Option<Duration>,
    ) {
        // Checked inline, in the caller: with neither, every attempt pays two loads for them.
        if self.header.is_none() && self.hook.is_none() {
            return;
        }
        self.stamp_metadata(headers, attempt, own_left);
    }

    fn stamp_metadata(
        &self,
        headers: &mut HeaderMap,
        attempt: u32,
        own_left: impl FnOnce() -> Option<Duration>,
    ) {
        if let Some(name) = &self.header {
            headers.insert(name.clone(), HeaderValue::from(attempt));
        }
        if let Some(hook) = &self.hook {
            hook.stamp(headers, attempt, own_left());
        }
    }
}

fn stamp_new_key(
    random: &RandomSource,
    method: &Method,
    headers: &mut HeaderMap,
) -> Option<SmallRng> {
    if is_idempotent(method) || headers.contains_key(&Idempotency::KEY_HEADER) {
        return None;
    }
    let mut stream = random.stream();
    let key: u128 = stream.random();
    let value =
        HeaderValue::try_from(format!("{key:032x}")).expect("hex digits are a valid header value");
    headers.insert(Idempotency::KEY_HEADER.clone(), value);
    Some(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut stamps = AttemptStamps {
            header: Some(HeaderName::from_static("x-attempt")),
            ..AttemptStamps::default()
        };
        let mut headers = HeaderMap::new();
        stamps.stamp(&mut headers, 2, || unreachable!("no hook"));
        assert_eq!(headers["x-attempt"], "2");
        stamps.hook = Some(Arc::new(Counting));
        stamps.stamp(&mut headers, 3, || Some(Duration::from_millis(40)));
        assert_eq!(headers["x-attempt"], "3");
        assert_eq!(headers["x-seen"], "30");
        assert_eq!(headers["x-left-ms"], "40");
        headers.insert("x-budget-ms", HeaderValue::from(250));
        assert_eq!(
            stamps.own_deadline(&headers),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn a_key_is_stamped_only_on_a_request_that_needs_one() {
        let mut stamps = AttemptStamps::default();
        let random = RandomSource::default();
        let mut headers = HeaderMap::new();
        assert!(stamps
            .stamp_key(&random, &Method::POST, &mut headers)
            .is_none());
        stamps.idempotency_key = true;
        assert!(stamps
            .stamp_key(&random, &Method::GET, &mut headers)
            .is_none());
        assert!(stamps
            .stamp_key(&random, &Method::POST, &mut headers)
            .is_some());
        let key = headers[&Idempotency::KEY_HEADER].clone();
        assert_eq!(key.len(), 32);
        // A request with its own key keeps it.
        assert!(stamps
            .stamp_key(&random, &Method::POST, &mut headers)
            .is_none());
        assert_eq!(headers[&Idempotency::KEY_HEADER], key);
    }
}
