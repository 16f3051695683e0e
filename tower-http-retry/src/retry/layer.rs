//! [`RetryLayer`] and its builder.

use super::attempt::AttemptHook;
use super::backoff::Backoff;
use super::budget::RetryBudget;
use super::config::{Config, Settings};
use super::hand_back::{FailUnsent, SendAnyway, Sorting};
use super::idempotency::Idempotency;
use super::nested::NestedLayers;
use super::service::Retry;
use super::stats::{Counters, RetryStats};
use crate::abort::AbortSignal;
use crate::classify::HttpClassifier;
use crate::error::InvalidConfig;
use crate::hint::HintPolicy;
use crate::pacing::{Pacer, Pacing, PacingStats};
use crate::random::RandomSource;
use http::header::HeaderName;
use http::uri::Authority;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tower_layer::Layer;

/// Wraps a service in [`Retry`]. Cloning is cheap (one `Arc`), and every clone, and every service
/// it makes, shares one budget, one set of counters and one abort signal.
///
/// ```
/// use std::time::Duration;
/// use tower::ServiceBuilder;
/// use tower_http_retry::{Backoff, Jitter, RetryLayer};
///
/// let retry = RetryLayer::builder()
///     .max_attempts(4)
///     .backoff(Backoff::new(Jitter::Full, Duration::from_millis(200), Duration::from_secs(5)))
///     .deadline(Duration::from_secs(30))
///     .build()
///     .expect("valid retry configuration");
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::io::Error>(http::Response::new(String::new()))
/// # });
/// let client = ServiceBuilder::new()
///     .layer(retry.clone())
///     .timeout(Duration::from_secs(2)) // per attempt: inside the retry layer
///     .service(client);
/// # let _ = client;
/// ```
///
/// # How a request flows through the layer
///
/// Each request goes through [`Retry`] like this: the outcome of an attempt is
/// [classified](HttpClassifier) as success, transient, permanent or not sent. Only a transient
/// outcome of a repeatable request (see [`Idempotency`]) with attempts left is retried, or a
/// request of any method that provably never reached the server
/// ([`NotSent`](crate::classify::NotSent)); the delay is the server's `Retry-After` if valid
/// ([`HintPolicy`], clamped) or else a draw from the [`Backoff`] policy; the delay must fit the
/// optional deadline; and the [`RetryBudget`] must grant a token. Then, and only then, the request
/// sleeps on tokio's clock, and an [`AbortSignal`] can end the sleep early. When it stops, the
/// layer returns the last real response or error, untouched, and a
/// [`RetryReport`](crate::RetryReport) says why it stopped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_http_retry::{RetryLayer, RetryReport, StopReason};
///
/// // An endpoint that answers 503 twice, then 200.
/// let calls = Arc::new(AtomicU32::new(0));
/// let counter = calls.clone();
/// let flaky = service_fn(move |_req: http::Request<String>| {
///     let n = counter.fetch_add(1, Ordering::SeqCst);
///     async move {
///         let status = if n < 2 { 503 } else { 200 };
///         Ok::<_, std::io::Error>(http::Response::builder().status(status).body(String::new()).unwrap())
///     }
/// });
///
/// let mut client = ServiceBuilder::new().layer(RetryLayer::new()).service(flaky);
/// let response = client.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap();
/// assert_eq!(response.status(), 200);
/// let report = RetryReport::of(&response);
/// assert_eq!((report.attempts, report.stop), (3, StopReason::Success));
/// # }
/// ```
///
/// # Why a budget, and not only a maximum number of attempts
///
/// `max_attempts` bounds what one request may do; it says nothing about all of them. When an
/// endpoint goes down, every request fails and every one of them retries, so the endpoint sees its
/// normal load times `max_attempts` at the worst moment. Jitter spreads *when* that load arrives;
/// only a budget bounds *how much* arrives. The [`TokenBucket`](crate::retry::TokenBucket) lets
/// retries add about 20 % to the load that succeeds (plus a small floor per second), so during an
/// outage most requests fail fast with their real error instead of piling on.
///
/// # Differences from `tower::retry`
///
/// * Jitter that actually de-synchronises: each request session draws from its own random
///   stream ([`RandomSource`]). `tower::retry::backoff::ExponentialBackoffMaker` clones one
///   generator into every session, so requests that fail together wait the same "random" delay.
/// * The budget is asked *before* sleeping, and a token taken for a sleep that is abandoned is
///   refunded. `TpsBudget` takes a mutex per operation; [`TokenBucket`](crate::retry::TokenBucket)
///   is lock-free.
/// * HTTP semantics built in: the status table, transport errors found through `source()`,
///   `Retry-After`, idempotency.
/// * The sleep can be aborted ([`AbortSignal`]), the request can have a deadline, and the
///   caller learns what happened ([`RetryReport`](crate::RetryReport), [`RetryStats`]).
///
/// # Where the timeout goes
///
/// A `tower::timeout::TimeoutLayer` *inside* the retry layer bounds each attempt (its
/// `Elapsed` error is transient, so a slow attempt is retried); one *outside* bounds the whole
/// request, sleeps included. Usually both: `timeout(total) -> retry -> timeout(per attempt)`.
///
/// # Retrying reqwest
///
/// With the `reqwest` feature:
///
/// reqwest 0.13's `Client` is a tower `Service<reqwest::Request>`, so the retry layer and the
/// circuit breaker wrap it like any other client. This module makes reqwest's types fit:
///
/// * `reqwest::Request` is a [`RetryRequest`](crate::retry::RetryRequest): its method and headers
///   decide idempotency, its URL's host and port are its authority (for a keyed circuit breaker and
///   the abort signal's holds), and it is copied for another attempt with `Request::try_clone`. A
///   request whose body is a stream cannot be copied: it is sent once
///   ([`StopReason::NotReplayable`](crate::StopReason::NotReplayable)).
/// * `reqwest::Response` is a [`RetryResponse`](crate::retry::RetryResponse): classified by status,
///   `Retry-After` read from its headers, and the [`RetryReport`](crate::RetryReport) put in its
///   extensions, read with [`RetryReport::of(&response)`](crate::RetryReport::of) as for an
///   `http::Response`. reqwest keeps a request's extensions private, so a
///   [`ReportSlot`](crate::report::ReportSlot) cannot be attached to a `reqwest::Request`; the
///   report of a request that ends in an error comes from
///   [`RetryReport::capture`](crate::RetryReport::capture), as for any outcome.
/// * `reqwest::Error` is an [`AsStdError`](crate::classify::AsStdError):
///   [`HttpClassifier`](crate::HttpClassifier) treats its timeouts and connection errors as
///   transient and walks its `source()` chain for the rest.
///
/// ```no_run
/// # #[cfg(feature = "reqwest")]
/// # async fn run() -> Result<(), tower::BoxError> {
/// use tower::{Service, ServiceBuilder, ServiceExt};
/// use tower_http_retry::{CircuitBreakerLayer, RetryLayer, RetryReport};
///
/// let client = reqwest::Client::new();
/// let mut service = ServiceBuilder::new()
///     .layer(RetryLayer::new())
///     .layer(CircuitBreakerLayer::new())
///     .service(client.clone());
/// let request = client.get("http://127.0.0.1:8080/health").build()?;
/// let response = service.ready().await?.call(request).await?;
/// println!("{} after {} attempts", response.status(), RetryReport::of(&response).attempts);
/// # Ok(())
/// # }
/// ```
///
/// `C` is the [classifier](RetryLayerBuilder::classifier), `H` what the layer returns for a
/// request it did not send ([`hand_back`](RetryLayerBuilder::hand_back)).
#[must_use]
pub struct RetryLayer<C = HttpClassifier, H = SendAnyway> {
    config: Arc<Config<Sorting<C, H>>>,
}

impl RetryLayer {
    /// The default configuration: up to 3 attempts, full jitter from 100 ms capped at 10 s,
    /// `Retry-After` honoured up to the cap, a default [`TokenBucket`](crate::retry::TokenBucket)
    /// budget, idempotent requests only.
    pub fn new() -> Self {
        RetryLayerBuilder::default()
            .build()
            .expect("the default configuration is valid")
    }

    /// A builder starting from the defaults of [`new`](Self::new).
    pub fn builder() -> RetryLayerBuilder {
        RetryLayerBuilder::default()
    }
}

impl<C, H> RetryLayer<C, H> {
    /// The counters of this layer and every clone of it (and every service they made), now.
    pub fn stats(&self) -> RetryStats {
        self.config.counters.snapshot()
    }

    /// The retry budget, if one is configured.
    pub fn budget(&self) -> Option<&Arc<dyn RetryBudget>> {
        self.config.settings.budget.as_ref()
    }

    /// The counters behind [`stats`](Self::stats): a hedging layer charged to this layer's
    /// budget counts its grants there too.
    pub(crate) fn counters(&self) -> &Counters {
        &self.config.counters
    }

    /// The backoff policy.
    pub fn backoff(&self) -> &Backoff {
        &self.config.settings.backoff
    }

    /// The most attempts per request, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.config.settings.max_attempts
    }

    /// The time from the call to the end of the last sleep, if bounded
    /// ([`RetryLayerBuilder::deadline`]).
    pub fn deadline(&self) -> Option<Duration> {
        self.config.settings.deadline
    }

    /// The pacing state of the endpoint `authority` (`None`: requests without one), if
    /// [pacing](RetryLayerBuilder::pacing) is on and the endpoint has a state.
    pub fn pacing_stats(&self, authority: Option<&Authority>) -> Option<PacingStats> {
        self.config.pacer.as_ref()?.stats(authority)
    }

    /// The pacer, if pacing is on: a hedging layer below keeps its latencies in its endpoints.
    pub(crate) fn pacer(&self) -> Option<&Pacer> {
        self.config.pacer.as_ref()
    }
}

impl Default for RetryLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<C, H> Clone for RetryLayer<C, H> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<S, C, H> Layer<S> for RetryLayer<C, H> {
    type Service = Retry<S, C, H>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry::new(inner, Arc::clone(&self.config))
    }
}

impl<C: fmt::Debug, H: fmt::Debug> fmt::Debug for RetryLayer<C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RetryLayer").field(&*self.config).finish()
    }
}

/// The builder after [`fail_unsent`](RetryLayerBuilder::fail_unsent): it hands a request the
/// layer did not send back as the service's error ([`FailUnsent`]).
pub type FailUnsentBuilder<C = HttpClassifier> = RetryLayerBuilder<C, FailUnsent>;

/// Configures a [`RetryLayer`]; [`build`](Self::build) checks every value.
///
/// | setter | default |
/// |---|---|
/// | [`max_attempts`](Self::max_attempts) | 3 (the first attempt included) |
/// | [`max_refused_retries`](Self::max_refused_retries) | 200 |
/// | [`backoff`](Self::backoff) | [`Jitter::Full`](crate::Jitter::Full), base 100 ms, cap 10 s, multiplier 2 |
/// | [`first_attempt_jitter`](Self::first_attempt_jitter) | none |
/// | [`hint_policy`](Self::hint_policy) (off: [`without_hint_delays`](Self::without_hint_delays)) | honoured, clamped to the backoff cap, +0–10 % jitter |
/// | [`budget`](Self::budget) (off: [`without_budget`](Self::without_budget)) | [`TokenBucket::default`](crate::retry::TokenBucket::default): 20 % extra load + 10/s, burst 100 |
/// | [`idempotency`](Self::idempotency) | [`Idempotency::MethodOrKey`] |
/// | [`stamp_idempotency_key`](Self::stamp_idempotency_key) | off |
/// | [`attempt_header`](Self::attempt_header) | none |
/// | [`deadline`](Self::deadline) | none |
/// | [`pacing`](Self::pacing) | off |
/// | [`abort_signal`](Self::abort_signal) | none |
/// | [`random_source`](Self::random_source) | [`RandomSource::from_entropy`] |
/// | [`wall_clock`](Self::wall_clock) | `SystemTime::now` |
/// | [`classifier`](Self::classifier) | [`HttpClassifier::new`] |
/// | [`hand_back`](Self::hand_back) ([`fail_unsent`](Self::fail_unsent)) | [`SendAnyway`] |
#[must_use]
pub struct RetryLayerBuilder<C = HttpClassifier, H = SendAnyway> {
    pub(super) classifier: C,
    pub(super) hand_back: H,
    pub(crate) settings: Settings,
}

impl Default for RetryLayerBuilder {
    fn default() -> Self {
        Self {
            classifier: HttpClassifier::new(),
            hand_back: SendAnyway,
            settings: Settings::default(),
        }
    }
}

impl<C, H> RetryLayerBuilder<C, H> {
    /// Sets the backoff policy.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.settings.backoff = backoff;
        self
    }

    /// Sets the most attempts per request, the first included (at least 1; 1 turns retries off).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.settings.max_attempts = attempts;
        self
    }

    /// Sets how many times per request a request the server turned away unprocessed
    /// ([`NotSent::Refused`](crate::classify::NotSent::Refused): an HTTP/2 `REFUSED_STREAM`, a
    /// `GOAWAY` that did not cover it) is sent again after a short jittered pause (4 ms at most the
    /// first time, doubling to 50 ms), whatever its method, without spending an attempt or a budget
    /// token (default 200; 0 turns these resends off). The default is generous because a server
    /// that rotates its connections every few requests turns a request of a large burst away many
    /// times (against nginx rotating every 3 requests, 100 concurrent requests met more than 40
    /// refusals each); the deadline bounds the resends too. A server that refuses the same request
    /// every time stops it with [`StopReason::RefusedTooOften`](crate::StopReason::RefusedTooOften)
    /// after at most ten seconds of pauses.
    pub fn max_refused_retries(mut self, retries: u32) -> Self {
        self.settings.max_refused_retries = retries;
        self
    }

    /// Delays every first attempt by `U(0, jitter)`, to spread a bulk fan-out (a batch of
    /// webhooks sent at once) before anything has failed.
    pub fn first_attempt_jitter(mut self, jitter: Duration) -> Self {
        self.settings.first_attempt_jitter = jitter;
        self
    }

    /// Sets how a server's hint of when to come back (`Retry-After`, a rate-limit reset) is
    /// used: its clamp, its spread, and what happens to one longer than the clamp.
    pub fn hint_policy(mut self, policy: HintPolicy) -> Self {
        self.settings.hint_policy = Some(policy);
        self
    }

    /// Sets which requests may be retried.
    pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.settings.idempotency = idempotency;
        self
    }

    /// Gives each request with a non-idempotent method and no `Idempotency-Key` a random key,
    /// the same on every attempt, which makes it retryable. Use only when the endpoint honours
    /// the header.
    pub fn stamp_idempotency_key(mut self, stamp: bool) -> Self {
        self.settings.stamps.idempotency_key = stamp;
        self
    }

    /// Sets a header that carries the attempt number (1 for the first attempt) on every attempt.
    /// Envoy's `x-envoy-attempt-count` is the usual convention (Envoy and the services behind it
    /// read it, and it is what Envoy itself sends); `x-retry-attempt` is another.
    ///
    /// ```
    /// use http::HeaderName;
    /// use tower_http_retry::RetryLayer;
    ///
    /// let layer = RetryLayer::builder()
    ///     .attempt_header(HeaderName::from_static("x-envoy-attempt-count"))
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn attempt_header(mut self, name: HeaderName) -> Self {
        self.settings.stamps.header = Some(name);
        self
    }

    /// Reads a request's own deadline when it arrives and stamps each attempt with `hook`'s
    /// metadata (a protocol's: the gRPC crate's `GrpcMetadata` reads and rewrites
    /// `grpc-timeout` and stamps `grpc-previous-rpc-attempts`). See [`AttemptHook`].
    pub fn attempt_hook(mut self, hook: impl AttemptHook) -> Self {
        self.settings.stamps.hook = Some(Arc::new(hook));
        self
    }

    /// What this layer does inside or around another retry layer (default
    /// [`NestedLayers::Defer`]: the outermost layer retries, the inner ones send once).
    pub fn nested_layers(mut self, nested: NestedLayers) -> Self {
        self.settings.nested = nested;
        self
    }

    /// Bounds the time from the call to the end of the last sleep, the first-attempt delay
    /// included: a sleep that would end later is not started and the last outcome is returned at
    /// once. (It does not cut an attempt in flight; an outer `TimeoutLayer` does that.)
    ///
    /// **With pacing, add [`fail_unsent`](Self::fail_unsent)** where the error type can hold an
    /// [`Unsent`](crate::report::Unsent) (a `tower::BoxError` can). Without it, a new request to
    /// an endpoint the pacer knows is down, which would wait past the deadline, is still sent
    /// once, into the outage; with it, the request comes back unsent, with when to try again
    /// (`resend_after`), and a redelivery queue holds it instead: 500 webhooks through an
    /// outage of 12 s with a 5 s deadline sent 28–31 requests into it with `fail_unsent`, as
    /// many as without a deadline, and 554–574 without it (`tests/pacing/deadline.rs`). It is
    /// not the default because it changes the service's error type. `tower-http-retry-redelivery`'s
    /// `Schedule::retry_layer()` sets both.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.settings.deadline = Some(deadline);
        self
    }

    /// Sets the retry budget, shared by every clone of the layer. To share one budget between
    /// several layers, pass an `Arc` of it to each.
    pub fn budget(mut self, budget: impl RetryBudget + 'static) -> Self {
        self.settings.budget = Some(Arc::new(budget));
        self
    }

    /// Ignores the delays servers hint at (`Retry-After`, rate-limit resets): the backoff policy
    /// alone decides every delay. Hints that stop retrying (`x-should-retry: false`) still do.
    pub fn without_hint_delays(mut self) -> Self {
        self.settings.hint_policy = None;
        self
    }

    /// Turns the retry budget off: only `max_attempts` bounds retries.
    pub fn without_budget(mut self) -> Self {
        self.settings.budget = None;
        self
    }

    /// Turns [endpoint pacing](Pacing) on: requests to an endpoint that is down wait in its queue
    /// and are released by probes and then a ramp, instead of sleeping on their own timers or
    /// being refused by the budget (which then slows the endpoint instead).
    pub fn pacing(mut self, pacing: Pacing) -> Self {
        self.settings.pacing = Some(pacing);
        self
    }

    /// Sets the signal that wakes sleeping requests (process shutdown, an opening breaker).
    pub fn abort_signal(mut self, signal: AbortSignal) -> Self {
        self.settings.abort = Some(signal);
        self
    }

    /// Labels this layer's metrics (feature `metrics`) with `layer="<label>"`, so that the
    /// scrape of a process with several retry layers (a webhook sender's, an API client's)
    /// says which one retried, gave up or was denied by its budget: the attempts, retries,
    /// requests, delays, budget withdrawals and refunds. One series per label: give each layer
    /// a fixed name, never one per request or per host. Without it the layer's metrics carry no
    /// `layer` label. An empty label fails [`build`](Self::build).
    ///
    /// ```
    /// use tower_http_retry::RetryLayer;
    ///
    /// let webhooks = RetryLayer::builder().metrics_label("webhooks").build().unwrap();
    /// let api = RetryLayer::builder().metrics_label("billing-api").build().unwrap();
    /// # let _ = (webhooks, api);
    /// assert!(RetryLayer::builder().metrics_label("").build().is_err());
    /// ```
    pub fn metrics_label(mut self, label: impl Into<String>) -> Self {
        self.settings.metrics_label = Some(label.into().into());
        self
    }

    /// Names the endpoints whose pacer metrics (mode changes, paced endpoint, queue depth) also
    /// carry `authority="<authority>"` (feature `metrics`): the few an on-call engineer must
    /// tell apart (a payment provider, a partner's webhook receiver). An allowlist, so that
    /// the series stay bounded: at most 64, each as the request's authority (the host, with
    /// the port when the URI has one; compared in lower case). The others are counted without
    /// the label. More than 64, or an empty one, fails [`build`](Self::build).
    ///
    /// ```
    /// use tower_http_retry::RetryLayer;
    ///
    /// let layer = RetryLayer::builder()
    ///     .metrics_label("webhooks")
    ///     .metrics_authorities(["hooks.partner.example", "api.payments.example:8443"])
    ///     .build()
    ///     .unwrap();
    /// # let _ = layer;
    /// ```
    pub fn metrics_authorities<I>(mut self, authorities: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.settings.metrics_authorities = crate::telemetry::authority_list(authorities);
        self
    }

    /// Sets where per-request random streams come from (seed it in tests and simulations).
    pub fn random_source(mut self, random: RandomSource) -> Self {
        self.settings.random = random;
        self
    }

    /// Sets the clock HTTP-date `Retry-After` values are measured against (default:
    /// `SystemTime::now`).
    pub fn wall_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.settings.wall_clock = Arc::new(clock);
        self
    }

    /// Replaces the classifier (the type changes with it).
    pub fn classifier<C2>(self, classifier: C2) -> RetryLayerBuilder<C2, H> {
        RetryLayerBuilder {
            classifier,
            hand_back: self.hand_back,
            settings: self.settings,
        }
    }

    /// Sets what the layer returns for a new request it did not send (see [`HandBack`](super::HandBack);
    /// the type changes with it). [`fail_unsent`](Self::fail_unsent) sets the common choice.
    pub fn hand_back<H2>(self, hand_back: H2) -> RetryLayerBuilder<C, H2> {
        RetryLayerBuilder {
            classifier: self.classifier,
            hand_back,
            settings: self.settings,
        }
    }

    /// Hands back, as the service's error, a new request the layer did not send
    /// ([`Unsent`](crate::report::Unsent): its endpoint is down or paused, and it would wait past
    /// its deadline or finds the queue full), instead of sending it once. The error type must
    /// implement `From<Unsent>`, as `tower::BoxError` does (after `tower::timeout`, say): a
    /// stack whose error cannot hold one does not compile. The same as
    /// [`hand_back(FailUnsent)`](Self::hand_back).
    ///
    /// The builder's type changes with it (the conversion is checked at compile time), to
    /// [`FailUnsentBuilder`]: code that passes builders around names that.
    ///
    /// ```
    /// use tower_http_retry::retry::{FailUnsentBuilder, RetryLayerBuilder};
    ///
    /// fn with_defaults(builder: RetryLayerBuilder) -> FailUnsentBuilder {
    ///     builder.max_attempts(5).fail_unsent()
    /// }
    /// let layer = with_defaults(RetryLayerBuilder::bulk()).build().unwrap();
    /// # let _ = layer;
    /// ```
    pub fn fail_unsent(self) -> FailUnsentBuilder<C> {
        self.hand_back(FailUnsent)
    }

    /// Checks every value and builds the layer.
    ///
    /// Fails, naming the field, on a backoff that cannot work (see [`Backoff::validate`]), zero
    /// `max_attempts`, a zero deadline, a first-attempt jitter or `Retry-After` clamp above
    /// [`InvalidConfig::MAX_DURATION`](crate::InvalidConfig::MAX_DURATION), a first-attempt jitter
    /// not below the deadline, a zero `Retry-After` clamp, or a `Retry-After` jitter outside `[0,
    /// 1]`.
    pub fn build(self) -> Result<RetryLayer<C, H>, InvalidConfig> {
        let sorting = Sorting::new(self.classifier, self.hand_back);
        Ok(RetryLayer {
            config: Arc::new(Config::new(sorting, self.settings)?),
        })
    }
}

impl<C: fmt::Debug, H: fmt::Debug> fmt::Debug for RetryLayerBuilder<C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayerBuilder")
            .field("classifier", &self.classifier)
            .field("hand_back", &self.hand_back)
            .field("settings", &self.settings)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Jitter;

    #[test]
    fn invalid_values_fail_at_build_time_naming_the_field() {
        let field = |b: RetryLayerBuilder| b.build().unwrap_err().field();
        assert_eq!(field(RetryLayer::builder().max_attempts(0)), "max_attempts");
        assert_eq!(
            field(RetryLayer::builder().deadline(Duration::ZERO)),
            "deadline"
        );
        let jitter_past_deadline = RetryLayer::builder()
            .deadline(Duration::from_secs(1))
            .first_attempt_jitter(Duration::from_secs(10));
        assert_eq!(field(jitter_past_deadline), "first_attempt_jitter");
        assert_eq!(
            field(RetryLayer::builder().first_attempt_jitter(Duration::MAX)),
            "first_attempt_jitter"
        );
        assert_eq!(
            field(
                RetryLayer::builder().hint_policy(HintPolicy::honored().max_delay(Duration::ZERO))
            ),
            "hint_policy.max_delay"
        );
        let inverted = Backoff::new(Jitter::Full, Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(
            field(RetryLayer::builder().backoff(inverted)),
            "backoff.cap"
        );
    }

    #[test]
    fn retry_after_clamp_defaults_to_the_backoff_cap() {
        let layer = RetryLayer::builder()
            .backoff(Backoff::new(
                Jitter::Full,
                Duration::from_millis(1),
                Duration::from_secs(7),
            ))
            .build()
            .unwrap();
        assert_eq!(layer.config.retry_after_clamp, Duration::from_secs(7));
    }
}
