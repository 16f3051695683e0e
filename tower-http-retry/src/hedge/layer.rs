//! [`HedgeLayer`] and its builder.

use super::config::{Charges, Config, SharedBudget};
use super::endpoints::{Endpoints, HoldsPacer, Sketches};
use super::gate::HedgeGate;
use super::service::Hedge;
use super::sketch::SketchRules;
use super::stats::{Counters, HedgeStats};
use crate::classify::HttpClassifier;
use crate::error::{
    at_least_one, duration_at_most_max, in_range, positive_duration, InvalidConfig,
};
use crate::pacing::Pacer;
use crate::retry::stats::Counters as RetryCounters;
use crate::retry::{Idempotency, RetryBudget, TokenBucket};
use crate::RetryLayer;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// Beyond this share of a window's requests outliving their delay, hedging pauses until the
/// window ends: at the quantile `1 - max_extra_load`, about `max_extra_load` of them should.
const PAUSE_SHARE: f64 = 0.5;

/// The most hedges of one request (gRPC's `hedgingPolicy` allows 5 copies in all).
const MAX_HEDGES: u32 = 4;

/// Sends a second copy of a slow request, and answers with the first classified success.
///
/// A hedge cuts the tail of an endpoint that is slow now and then, not one that fails: once a
/// copy has been in flight longer than the delay (by default the endpoint's latency at the
/// quantile `1 - max_extra_load`, read from the last window), another copy goes out, and the
/// first success, or the first permanent answer, wins; the other copies are dropped (their
/// requests cancelled). A fast transient failure never beats a slow success: a `503` from one
/// copy waits for the others, and is returned only if none of them does better.
///
/// What keeps it from becoming a second herd:
/// - only requests that may be repeated are hedged (the [`Idempotency`] rules of retries);
/// - every hedge is paid twice: a token of the layer's cap, which each request fills by
///   `max_extra_load` (hedges add at most that share of the load, beyond a burst), and a token
///   of the shared retry budget when one is set ([`retry_layer`](HedgeLayerBuilder::retry_layer)
///   or [`budget`](HedgeLayerBuilder::budget)): a hedge spends what a retry would;
/// - a hedge is sent only when every [gate](HedgeGate) allows it: the retry layer's pacer (none
///   while the endpoint is probed, ramped or paused) and the circuit breaker (none while it is
///   open or half-open);
/// - when nearly every request outlives its delay (a brownout, not a tail: more than half of a
///   window's), hedging pauses until the window ends, and resumes at the delay the slower
///   latencies give (with the delay read from the latencies; a fixed [`delay`](HedgeLayerBuilder::delay)
///   has no pause).
///
/// It goes below the retry layer, which then sees a hedged request as one attempt, and above
/// the circuit breaker and the per-attempt timeout, which see each copy:
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_http_retry::hedge::HedgeLayer;
/// use tower_http_retry::report::HedgeReport;
/// use tower_http_retry::{CircuitBreakerLayer, RetryLayer};
///
/// let retry = RetryLayer::interactive();
/// let breaker = CircuitBreakerLayer::interactive();
/// let hedge = HedgeLayer::builder()
///     .delay(Duration::from_millis(20)) // or from the endpoint's latencies, the default
///     .retry_layer(&retry)
///     .gate(breaker.clone())
///     .build()
///     .unwrap();
/// let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
/// let counted = calls.clone();
/// let first_stalls = service_fn(move |_: http::Request<String>| {
///     let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
///     async move {
///         if n == 0 {
///             tokio::time::sleep(Duration::from_secs(1)).await; // the tail
///         }
///         Ok::<_, std::io::Error>(http::Response::new(String::new()))
///     }
/// });
/// let client = ServiceBuilder::new()
///     .layer(retry)
///     .layer(hedge.clone())
///     .layer(breaker)
///     .timeout(Duration::from_secs(2))
///     .service(first_stalls);
/// let started = tokio::time::Instant::now();
/// let response = client.oneshot(http::Request::new(String::new())).await.unwrap();
/// assert_eq!(started.elapsed(), Duration::from_millis(20)); // the hedge's answer
/// assert_eq!(HedgeReport::of(&response).map(|r| r.winner), Some(1));
/// assert_eq!(hedge.stats().hedges, 1);
/// # }
/// ```
///
/// # How this differs from `tower::hedge`
///
/// tower's hedge sends its copy at a latency percentile too, but the first copy to finish wins
/// whatever it returned (a fast `503` beats a slow `200`), every request may be hedged, and
/// nothing but its percentile bounds the extra load: no budget, no pause in a brownout, and no
/// knowledge of a pacer or a breaker. It also reads its delay only from the previous period, so
/// it hedges nothing in its first one.
#[must_use]
pub struct HedgeLayer<C = HttpClassifier> {
    config: Arc<Config<C>>,
}

impl HedgeLayer {
    /// A builder starting from the defaults.
    pub fn builder() -> HedgeLayerBuilder {
        HedgeLayerBuilder::default()
    }
}

impl<C> HedgeLayer<C> {
    /// The counters of this layer and every clone of it (and every service they made), now.
    pub fn stats(&self) -> HedgeStats {
        self.config.counters.snapshot()
    }

    /// Endpoints with a latency sketch now (at most
    /// [`max_endpoints`](HedgeLayerBuilder::max_endpoints), or the pacer's, when the sketches
    /// are kept in a retry layer's pacer).
    pub fn endpoints(&self) -> usize {
        self.config.sketches.len()
    }
}

impl<C> Clone for HedgeLayer<C> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<S, C> Layer<S> for HedgeLayer<C> {
    type Service = Hedge<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Hedge::new(inner, Arc::clone(&self.config))
    }
}

impl<C: fmt::Debug> fmt::Debug for HedgeLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HedgeLayer").field(&*self.config).finish()
    }
}

/// Configures a [`HedgeLayer`]; [`build`](Self::build) checks every value.
///
/// | setter | default |
/// |---|---|
/// | [`max_extra_load`](Self::max_extra_load) | 0.05: hedges add at most 5 % to the requests, and the delay is the 95th percentile |
/// | [`burst`](Self::burst) | 10 hedges beyond that share |
/// | [`delay`](Self::delay) | none: read from the endpoint's latencies |
/// | [`min_delay`](Self::min_delay) | 1 ms |
/// | [`window`](Self::window) | 30 s |
/// | [`min_samples`](Self::min_samples) | 20 latencies per window |
/// | [`max_hedges`](Self::max_hedges) | 1 per request |
/// | [`idempotency`](Self::idempotency) | [`Idempotency::MethodOrKey`] |
/// | [`budget`](Self::budget), [`retry_layer`](Self::retry_layer) | none |
/// | [`gate`](Self::gate) | none |
/// | [`max_endpoints`](Self::max_endpoints) | 256 |
#[must_use]
pub struct HedgeLayerBuilder<C = HttpClassifier> {
    classifier: C,
    max_extra_load: f64,
    burst: f64,
    delay: Option<Duration>,
    min_delay: Duration,
    window: Duration,
    min_samples: u32,
    max_hedges: u32,
    idempotency: Idempotency,
    budget: Option<SharedBudget>,
    gates: Vec<Arc<dyn HedgeGate>>,
    max_endpoints: usize,
    /// The retry layer above, whose pacer may keep the sketches.
    retry: Option<Arc<dyn HoldsPacer>>,
}

impl Default for HedgeLayerBuilder {
    fn default() -> Self {
        Self {
            classifier: HttpClassifier::default(),
            max_extra_load: 0.05,
            burst: 10.0,
            delay: None,
            min_delay: Duration::from_millis(1),
            window: Duration::from_secs(30),
            min_samples: 20,
            max_hedges: 1,
            idempotency: Idempotency::default(),
            budget: None,
            gates: Vec::new(),
            max_endpoints: 256,
            retry: None,
        }
    }
}

impl<C> HedgeLayerBuilder<C> {
    /// The most hedges may add to the requests, as a share of them (`0.05`: 5 %), in `(0, 1]`.
    /// Each request adds this much to the cap's tokens and a hedge takes a whole one; the delay
    /// read from the latencies is their `1 - max_extra_load` quantile.
    pub fn max_extra_load(mut self, share: f64) -> Self {
        self.max_extra_load = share;
        self
    }

    /// Hedges the cap holds, and starts with, beyond its share: at least 1.
    pub fn burst(mut self, hedges: f64) -> Self {
        self.burst = hedges;
        self
    }

    /// Hedges after this fixed delay instead of the endpoint's latencies (zero: every copy at
    /// once, as gRPC's `hedgingDelay` of `0s`).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The shortest delay read from the latencies: a hedge sooner than this saves little.
    pub fn min_delay(mut self, delay: Duration) -> Self {
        self.min_delay = delay;
        self
    }

    /// How long a window of latencies lasts: the delay is read from the last full window (or
    /// from the current one until there is one), and a pause lasts until the window ends.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Latencies a window needs before a delay is read from it (and requests given a delay
    /// before a brownout can pause hedging).
    pub fn min_samples(mut self, samples: u32) -> Self {
        self.min_samples = samples;
        self
    }

    /// The most hedges of one request, 1 to 4; each one after its own delay.
    pub fn max_hedges(mut self, hedges: u32) -> Self {
        self.max_hedges = hedges;
        self
    }

    /// Which requests may be hedged; the retry layer's rules by default.
    pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// Charges every hedge to `budget` too, as a retry: give it the one the retry layer spends.
    pub fn budget(mut self, budget: Arc<dyn RetryBudget>) -> Self {
        self.budget = Some(SharedBudget {
            budget,
            counters: RetryCounters::default(),
        });
        self
    }

    /// Charges every hedge to `retry`'s budget, and sends none while its pacer paces the
    /// endpoint: the retry layer above this one, whose attempts the hedges copy. With pacing on,
    /// the first hedging layer built with it (or a clone of it) that reads its delay from the
    /// latencies keeps them in the pacer's endpoints, for as long as the retry layer lives
    /// (bounded by its [`max_endpoints`](crate::pacing::PacingBuilder::max_endpoints), not this
    /// layer's, and forgotten with an open endpoint the pacer forgets to make room), where
    /// [`pacing_stats`](RetryLayer::pacing_stats) reads the delay: one view of the endpoint,
    /// its mode, limit and latencies, in one place. A later hedging layer built with the same
    /// retry layer keeps its own, as without pacing.
    pub fn retry_layer<R: Send + Sync + fmt::Debug + 'static>(
        mut self,
        retry: &RetryLayer<R>,
    ) -> Self {
        // A budget set before stays when the retry layer has none.
        let shared = retry.budget().map(|budget| SharedBudget {
            budget: Arc::clone(budget),
            counters: retry.counters().clone(),
        });
        self.budget = shared.or(self.budget);
        let retry = Arc::new(retry.clone());
        self.gates.push(retry.clone());
        self.retry = Some(retry);
        self
    }

    /// Sends a hedge only when `gate` allows it too (a
    /// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer): only while its circuit is closed).
    pub fn gate(mut self, gate: impl HedgeGate) -> Self {
        self.gates.push(Arc::new(gate));
        self
    }

    /// The most endpoints with a latency sketch (about 20 KiB each); a request to another one is
    /// not hedged until a sketch unused for two windows is forgotten. Not used when the sketches
    /// are kept in a retry layer's pacer ([`retry_layer`](Self::retry_layer)).
    pub fn max_endpoints(mut self, endpoints: usize) -> Self {
        self.max_endpoints = endpoints;
        self
    }

    /// Classifies each copy's outcome with `classifier` (only a success or a permanent answer
    /// wins).
    pub fn classifier<C2>(self, classifier: C2) -> HedgeLayerBuilder<C2> {
        HedgeLayerBuilder {
            classifier,
            max_extra_load: self.max_extra_load,
            burst: self.burst,
            delay: self.delay,
            min_delay: self.min_delay,
            window: self.window,
            min_samples: self.min_samples,
            max_hedges: self.max_hedges,
            idempotency: self.idempotency,
            budget: self.budget,
            gates: self.gates,
            max_endpoints: self.max_endpoints,
            retry: self.retry,
        }
    }

    /// Checks the values and builds the layer.
    ///
    /// ```
    /// use tower_http_retry::hedge::HedgeLayer;
    ///
    /// let err = HedgeLayer::builder().max_extra_load(0.0).build().unwrap_err();
    /// assert_eq!(err.field(), "hedge.max_extra_load");
    /// ```
    pub fn build(self) -> Result<HedgeLayer<C>, InvalidConfig> {
        in_range("hedge.max_extra_load", self.max_extra_load, 0.0, 1.0)?;
        if self.max_extra_load == 0.0 {
            return Err(InvalidConfig::new(
                "hedge.max_extra_load",
                "must be greater than zero (no hedges: leave the layer out)",
            ));
        }
        in_range("hedge.burst", self.burst, 1.0, 1e6)?;
        if let Some(delay) = self.delay {
            duration_at_most_max("hedge.delay", delay)?;
        }
        positive_duration("hedge.min_delay", self.min_delay)?;
        positive_duration("hedge.window", self.window)?;
        at_least_one("hedge.min_samples", u64::from(self.min_samples))?;
        at_least_one("hedge.max_hedges", u64::from(self.max_hedges))?;
        if self.max_hedges > MAX_HEDGES {
            return Err(InvalidConfig::new(
                "hedge.max_hedges",
                format!("must be at most {MAX_HEDGES}"),
            ));
        }
        at_least_one("hedge.max_endpoints", self.max_endpoints as u64)?;
        let cap = TokenBucket::builder()
            .capacity(self.burst)
            .deposit_per_success(self.max_extra_load)
            .refill_per_second(0.0)
            .build()?;
        Ok(HedgeLayer {
            config: Arc::new(Config {
                classifier: self.classifier,
                idempotency: self.idempotency,
                fixed_delay: self.delay,
                rules: SketchRules {
                    quantile: 1.0 - self.max_extra_load,
                    floor: self.min_delay,
                    window: self.window,
                    min_samples: self.min_samples,
                    pause_share: PAUSE_SHARE,
                },
                max_hedges: self.max_hedges,
                charges: Arc::new(Charges {
                    cap,
                    budget: self.budget,
                }),
                gates: self.gates,
                // A fixed delay reads no latencies: it leaves the pacer to a layer that does.
                sketches: match self.retry {
                    Some(retry)
                        if self.delay.is_none()
                            && retry.pacer().is_some_and(Pacer::claim_for_hedging) =>
                    {
                        Sketches::Pacer(retry)
                    }
                    _ => Sketches::Own(Endpoints::new(self.max_endpoints)),
                },
                counters: Counters::default(),
            }),
        })
    }
}

impl<C: fmt::Debug> fmt::Debug for HedgeLayerBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgeLayerBuilder")
            .field("classifier", &self.classifier)
            .field("max_extra_load", &self.max_extra_load)
            .field("burst", &self.burst)
            .field("delay", &self.delay)
            .field("min_delay", &self.min_delay)
            .field("window", &self.window)
            .field("min_samples", &self.min_samples)
            .field("max_hedges", &self.max_hedges)
            .field("idempotency", &self.idempotency)
            .field("budget", &self.budget)
            .field("gates", &self.gates)
            .field("max_endpoints", &self.max_endpoints)
            .field("retry_layer", &self.retry.is_some())
            .finish()
    }
}
