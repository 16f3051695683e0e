//! [`ReleaseBodyLayer`] and its builder.

use super::config::Config;
use super::service::ReleaseBody;
use crate::classify::HttpClassifier;
use crate::error::{at_least_one, InvalidConfig};
use std::fmt;
use std::sync::Arc;
use tower_layer::Layer;

/// Wraps a service in [`ReleaseBody`], which reads the body of each transient response before
/// returning it, so that its connection is free while the retry layer sleeps. Cloning is cheap
/// (one `Arc`).
///
/// # Why
///
/// The retry layer keeps the last response of a request until the next attempt is sent, so that
/// it can return it if it gives up. Over HTTP/1, a response whose body has not been read to its
/// end keeps its connection checked out of the client's pool: the connection serves no other
/// request, and when the response is dropped with its body unread, the connection is closed
/// rather than reused. hyper reads a small body along with the head, but leaves one of a few KiB
/// or more on the socket. So in an outage behind a load balancer that answers 503, every
/// sleeping request holds a socket at both ends, and every retry opens a new one: 50 GETs that
/// each get one 503 with a 16 KiB body, sleep and then succeed open 100 connections instead of 50.
///
/// # What it does
///
/// It reads the body of every response its classifier calls transient before returning the
/// response, and drops the inner body, so that nothing is held while the retry layer sleeps:
///
/// * a body within the limit ([`ReleaseBodyLayer::DEFAULT_LIMIT`], 64 KiB, unless told otherwise)
///   is read to its end, trailers included, and its connection goes back to the pool for the retry;
/// * a longer body keeps its first `limit` bytes, and the rest is dropped unread, which closes
///   its connection before the sleep rather than after it
///   ([`ReleasedBody::is_truncated`](crate::body::ReleasedBody::is_truncated));
/// * every other response (success, permanent, an error) is returned at once, its body streamed
///   untouched.
///
/// The response keeps its status, headers and extensions, so when the retry layer gives up it
/// returns the last response as it came, with the part of its body that was read.
///
/// With the feature `json`, a whole body whose `Content-Type` says JSON is also read for a
/// `google.rpc.RetryInfo` (Google's APIs and Gemini put their "come back in" there, in no header),
/// which goes into the response's extensions as a [`RetryInfo`](crate::hint::RetryInfo), where
/// [`HttpClassifier`] finds it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, Full};
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_http_retry::RetryLayer;
/// use tower_http_retry::body::ReleaseBodyLayer;
///
/// // An upstream that always answers 503 with a 100 KiB page.
/// let upstream = service_fn(|_: http::Request<String>| async {
///     let page = Full::new(Bytes::from(vec![b'x'; 100 * 1024]));
///     let response = http::Response::builder().status(503).header("x-served-by", "lb-3");
///     Ok::<_, std::io::Error>(response.body(page).unwrap())
/// });
/// let mut client = ServiceBuilder::new()
///     .layer(RetryLayer::new())
///     .layer(ReleaseBodyLayer::new())
///     .service(upstream);
///
/// let response = client.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap();
/// // The retry layer gave up and returned the last response: its head, and the first 64 KiB of
/// // its body, read before the retry layer slept.
/// assert_eq!(response.status(), 503);
/// assert_eq!(response.headers()["x-served-by"], "lb-3");
/// assert!(response.body().is_truncated());
/// let page = response.into_body().collect().await.unwrap().to_bytes();
/// assert_eq!(page.len(), 64 * 1024);
/// # }
/// ```
///
/// # Where it goes
///
/// Under the retry layer (and under a circuit breaker, if any), and under the per-attempt
/// timeout, so that reading a slow body counts against the attempt:
///
/// ```
/// use std::time::Duration;
/// use tower::ServiceBuilder;
/// use tower_http_retry::RetryLayer;
/// use tower_http_retry::body::ReleaseBodyLayer;
///
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::io::Error>(http::Response::new(http_body_util::Full::new(bytes::Bytes::new())))
/// # });
/// let client = ServiceBuilder::new()
///     .layer(RetryLayer::new())
///     .timeout(Duration::from_secs(5))  // each attempt, reading a transient body included
///     .layer(ReleaseBodyLayer::new())   // transient bodies read before the retry layer sleeps
///     .service(client);
/// # let _ = client;
/// ```
///
/// Its classifier should be the retry layer's, so that the bodies read are those of the
/// responses the retry layer sleeps after. The last response of a request that the retry layer
/// gives up on is transient too, and is returned read (up to the limit) rather than streamed.
#[must_use]
pub struct ReleaseBodyLayer<C = HttpClassifier> {
    config: Arc<Config<C>>,
}

impl ReleaseBodyLayer {
    /// The most bytes of a transient response body [`ReleaseBody`] keeps unless told otherwise:
    /// 64 KiB.
    pub const DEFAULT_LIMIT: usize = 64 * 1024;

    /// Keeps up to [`ReleaseBodyLayer::DEFAULT_LIMIT`] bytes of each body [`HttpClassifier::new`]
    /// calls transient.
    pub fn new() -> Self {
        ReleaseBodyLayerBuilder::default()
            .build()
            .expect("the default configuration is valid")
    }

    /// A builder starting from the defaults of [`new`](Self::new).
    pub fn builder() -> ReleaseBodyLayerBuilder {
        ReleaseBodyLayerBuilder::default()
    }
}

impl<C> ReleaseBodyLayer<C> {
    /// The most bytes of a transient body kept.
    pub fn limit(&self) -> usize {
        self.config.limit
    }
}

impl Default for ReleaseBodyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> Clone for ReleaseBodyLayer<C> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<S, C> Layer<S> for ReleaseBodyLayer<C> {
    type Service = ReleaseBody<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        ReleaseBody::new(inner, Arc::clone(&self.config))
    }
}

impl<C: fmt::Debug> fmt::Debug for ReleaseBodyLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ReleaseBodyLayer")
            .field(&*self.config)
            .finish()
    }
}

/// Configures a [`ReleaseBodyLayer`]; [`build`](Self::build) checks every value.
///
/// | setter | default |
/// |---|---|
/// | [`limit`](Self::limit) | [`ReleaseBodyLayer::DEFAULT_LIMIT`] (64 KiB) |
/// | [`classifier`](Self::classifier) | [`HttpClassifier::new`] |
///
/// ```
/// use tower_http_retry::body::ReleaseBodyLayer;
///
/// let layer = ReleaseBodyLayer::builder().limit(4 * 1024).build().expect("valid limit");
/// assert_eq!(layer.limit(), 4096);
/// let error = ReleaseBodyLayer::builder().limit(0).build().unwrap_err();
/// assert_eq!(error.field(), "limit");
/// ```
#[must_use]
pub struct ReleaseBodyLayerBuilder<C = HttpClassifier> {
    classifier: C,
    limit: usize,
}

impl Default for ReleaseBodyLayerBuilder {
    fn default() -> Self {
        Self {
            classifier: HttpClassifier::new(),
            limit: ReleaseBodyLayer::DEFAULT_LIMIT,
        }
    }
}

impl<C> ReleaseBodyLayerBuilder<C> {
    /// Sets the most bytes of a transient body kept (at least 1). A longer body keeps its first
    /// `limit` bytes, and the rest is dropped unread, which closes its connection.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Replaces the classifier (the type changes with it). Only the bodies of responses it calls
    /// [`Outcome::Transient`](crate::Outcome::Transient) or
    /// [`Outcome::NotSent`](crate::Outcome::NotSent) (those the retry layer may send again) are
    /// read.
    pub fn classifier<C2>(self, classifier: C2) -> ReleaseBodyLayerBuilder<C2> {
        ReleaseBodyLayerBuilder {
            classifier,
            limit: self.limit,
        }
    }

    /// Checks every value and builds the layer.
    ///
    /// Fails on a zero `limit`: it would drop the body of every transient response, and with it
    /// the body of the last response the retry layer returns (0 does not mean "no limit").
    pub fn build(self) -> Result<ReleaseBodyLayer<C>, InvalidConfig> {
        at_least_one("limit", self.limit as u64)?;
        Ok(ReleaseBodyLayer {
            config: Arc::new(Config {
                classifier: self.classifier,
                limit: self.limit,
            }),
        })
    }
}

impl<C: fmt::Debug> fmt::Debug for ReleaseBodyLayerBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseBodyLayerBuilder")
            .field("classifier", &self.classifier)
            .field("limit", &self.limit)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_limit_fails_at_build_time_naming_the_field() {
        let error = ReleaseBodyLayer::builder().limit(0).build().unwrap_err();
        assert_eq!(error.field(), "limit");
    }

    #[test]
    fn the_default_limit_is_64_kib() {
        assert_eq!(ReleaseBodyLayer::new().limit(), 64 * 1024);
    }
}
