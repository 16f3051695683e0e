//! [`Pacing`], the configuration of endpoint pacing, and its builder.

use super::limit::AdaptiveConcurrency;
use super::rate::{additive_increase, RateConfig};
use super::rules::PacingRules;
use super::store::PacingStore;
use crate::error::{at_least_one, in_range, positive_duration, InvalidConfig};
use http::StatusCode;
use std::sync::Arc;
use std::time::Duration;

/// The share of the accepted rate a ramp keeps after a loss (`β`).
const DECREASE: f64 = 0.7;

/// Endpoint pacing: after an outage, deliveries wait and recover within seconds of the endpoint,
/// instead of either firing on their own timers or being refused.
///
/// Give it to [`RetryLayerBuilder::pacing`](crate::retry::RetryLayerBuilder::pacing). The retry
/// layer then keeps a small state per endpoint (per authority of the request URI), learns from
/// every outcome it sees, and decides for each request to an endpoint in trouble *when* it goes:
///
/// * **Open** (healthy): nothing changes; retries sleep their backoff and ask the budget.
/// * **Probing**: after [`outage_after`](PacingBuilder::outage_after) congestion outcomes in a
///   row (429, 502, 503, 504, a timeout, a connection failure), or when the retry budget is
///   empty, the endpoint is down. Retries no longer fire on their own timers (nor are they
///   refused by the budget): they wait in a FIFO queue, and the pacer lets one through every
///   [`probe_interval`](PacingBuilder::probe_interval) (jittered), at most
///   [`probes_in_flight`](PacingBuilder::probes_in_flight) at once. A probe is a real waiting
///   request, so a probe that succeeds is a delivery.
/// * **Ramping**: after the first success, waiting requests are released at a rate that starts
///   at the probe rate and doubles every [`ramp_interval`](PacingBuilder::ramp_interval) while
///   the losses in an interval stay at most [`loss_threshold`](PacingBuilder::loss_threshold).
///   Above it, the rate drops to 70 % of what the endpoint *accepted* in that interval, and grows
///   back along a cubic curve that regains it in [`regain`](PacingBuilder::regain) and then
///   probes past it, and at least by the same additive step whatever the rate (about 53 per
///   second each second at the default interval: RFC 8312's TCP-friendly region), so that
///   processes pacing the same endpoint alone converge towards equal shares. Once the rate has
///   kept up with the demand (at most the request asking waits) for a second without loss, the
///   endpoint is open again. An endpoint that fails again
///   while ramping (a flapping one) is down again by the same rule as an open one,
///   [`outage_after`](PacingBuilder::outage_after) congestion outcomes in a row, once nothing
///   has been taken for a whole `ramp_interval` (a limit that rejects in runs while it still
///   takes requests is a rate to find, not an outage), and is probed as in a fresh start.
/// * **Paused**: nothing is released until the pause ends, and the release afterwards ramps from
///   the probe rate (or from the cut of the ramp that was running), so a shared hint cannot
///   bring the herd back in one instant.
///
/// # What a `Retry-After` does
///
/// RFC 9110 (section 10.2.3) makes `Retry-After` how long the user agent ought to wait before
/// a follow-up request: a statement about the request it answers, not about every other
/// request. Rate limiters send it with each rejection while they serve the rest. So a hint
/// (`Retry-After`, `retry-after-ms`, a gRPC pushback), clamped, is:
/// * **a floor for that request**: its retry is not sent before it;
/// * **a rate signal for the endpoint** while it still takes requests (it answered a success
///   within the last `ramp_interval`): a ramping endpoint's rate is cut once, as for a loss (one
///   cut per loss event); an open endpoint is not paced, and stays so;
/// * **a pause of the whole endpoint** only when nothing gets through (the endpoint is down or
///   paused, or took nothing for an interval), or when the server says the quota the endpoint
///   shares is used up ([`ServerHint::is_quota_reset`](crate::hint::ServerHint::is_quota_reset):
///   `RateLimit` with `r=0`, `X-RateLimit-Remaining: 0` with a reset, a 429 or 503 whose
///   `X-RateLimit-Reset` is its window's). A success that used up the quota pauses it too.
///
/// # Deadlines and new requests
///
/// With [`first_attempts`](PacingBuilder::first_attempts) on (the default), a *new* request to an
/// endpoint that is down or paused waits in the same queue, so new deliveries do not pile onto
/// it. A retry whose predicted wait is beyond its [deadline](crate::retry::RetryLayerBuilder::deadline),
/// or that finds the queue full (or that is still waiting when its deadline comes), returns with
/// [`StopReason::Deferred`](crate::StopReason::Deferred) and its last outcome. A new request in
/// that case has no outcome to return: with
/// [`fail_unsent`](crate::retry::RetryLayerBuilder::fail_unsent) it is handed back at once, unsent, as
/// an [`Unsent`](crate::report::Unsent) error (never a blind first attempt into an endpoint known
/// to be down); without it, it is sent once. The predicted wait is the pacer's schedule: the
/// next probe (or the end of a pause), then a slow start from the probe rate up to the rate the
/// endpoint took at its last loss.
///
/// [`RetryReport::resend_after`](crate::RetryReport::resend_after) says when an outer durable
/// queue should send a deferred request again: its place's predicted release (requests turned
/// away take the places behind the queue, one after another), jittered within the place's gap,
/// never inside a known pause, and never before what is left of the server's hint or a
/// breaker's hold. A burst deferred together so comes back spread over the predicted releases,
/// not in one instant.
///
/// A shutdown of the [`AbortSignal`](crate::AbortSignal) releases every waiter at once with its
/// last outcome; a breaker's hold of the signal (or its refusal,
/// [`CircuitOpen`](crate::circuit_breaker::CircuitOpen)) does not: it pauses the endpoint until the breaker lets a
/// probe through, and the waiters keep waiting. Dropping a waiting future frees its place.
///
/// Pacing is for senders that would rather wait than fail: webhooks, batch clients, queue
/// consumers. An interactive call that wants an answer now is better served by a short retry
/// sequence and a [`CircuitBreakerLayer`](crate::CircuitBreakerLayer), which fails fast.
///
/// ```
/// use std::time::Duration;
/// use tower_http_retry::{Pacing, RetryLayer};
///
/// let retry = RetryLayer::builder()
///     .max_attempts(10)
///     .pacing(Pacing::builder().probe_interval(Duration::from_millis(500)).build().unwrap())
///     .build()
///     .unwrap();
/// # let _ = retry;
/// ```
#[derive(Clone, Debug)]
pub struct Pacing {
    rules: Arc<PacingRules>,
    /// Where a fleet keeps what it shares of each endpoint; `None`: this layer paces alone.
    store: Option<Arc<dyn PacingStore>>,
    concurrency: Option<AdaptiveConcurrency>,
}

impl Pacing {
    /// The defaults of [`PacingBuilder`].
    pub fn new() -> Self {
        Self::builder()
            .build()
            .expect("the default configuration is valid")
    }

    /// A builder starting from the defaults.
    pub fn builder() -> PacingBuilder {
        PacingBuilder::default()
    }

    /// The checked rules, which a [`PacingStore`] applies events by.
    pub fn rules(&self) -> &PacingRules {
        &self.rules
    }

    /// The fleet's store, if the endpoints are paced with one.
    pub(crate) fn store(&self) -> Option<&Arc<dyn PacingStore>> {
        self.store.as_ref()
    }

    /// The adaptive limit on each endpoint's requests in flight, if it is on.
    pub(crate) fn concurrency(&self) -> Option<AdaptiveConcurrency> {
        self.concurrency
    }
}

impl Default for Pacing {
    fn default() -> Self {
        Self::new()
    }
}

/// Configures [`Pacing`]; [`build`](Self::build) checks every value.
///
/// | setter | default | why |
/// |---|---|---|
/// | [`probe_interval`](Self::probe_interval) | 500 ms (2 probes/s), jittered ±50 % | a dead endpoint sees about 2 requests per second from each sender |
/// | [`probes_in_flight`](Self::probes_in_flight) | 2 | a hung probe does not stop probing |
/// | [`outage_after`](Self::outage_after) | 5 congestion outcomes in a row | a stray 503 does not pace an endpoint |
/// | [`ramp_interval`](Self::ramp_interval) | 100 ms | the rate doubles ten times a second: 2/s to 2,000/s in one second |
/// | [`loss_threshold`](Self::loss_threshold) | 0.05 | a capacity limit is found with few rejections |
/// | [`regain`](Self::regain) | 1 s | after a loss, 70 % of the accepted rate back to 100 % in a second |
/// | [`max_waiters`](Self::max_waiters) | 65,536 per endpoint | past it a request is deferred, not queued |
/// | [`max_queue_wait`](Self::max_queue_wait) | none: the request's deadline | a request predicted to wait longer is deferred, not queued |
/// | [`max_endpoints`](Self::max_endpoints) | 1,024 | the state kept is bounded |
/// | [`first_attempts`](Self::first_attempts) | on | new requests to a dead endpoint wait too |
/// | [`congestion`](Self::congestion) | 429, 502, 503, 504 | plus timeouts and connection failures |
/// | [`store`](Self::store) | none: each layer paces alone | a fleet paces as one |
#[derive(Clone, Debug)]
#[must_use]
pub struct PacingBuilder {
    probe_interval: Duration,
    probes_in_flight: u32,
    outage_after: u32,
    ramp_interval: Duration,
    loss_threshold: f64,
    regain: Duration,
    max_waiters: usize,
    max_queue_wait: Duration,
    max_endpoints: usize,
    first_attempts: bool,
    congestion: Vec<StatusCode>,
    store: Option<Arc<dyn PacingStore>>,
    concurrency: Option<AdaptiveConcurrency>,
}

impl Default for PacingBuilder {
    fn default() -> Self {
        Self {
            probe_interval: Duration::from_millis(500),
            probes_in_flight: 2,
            outage_after: 5,
            ramp_interval: Duration::from_millis(100),
            loss_threshold: 0.05,
            regain: Duration::from_secs(1),
            max_waiters: 65_536,
            max_queue_wait: Duration::MAX,
            max_endpoints: 1024,
            first_attempts: true,
            congestion: [429, 502, 503, 504]
                .map(|code| StatusCode::from_u16(code).expect("a valid status"))
                .to_vec(),
            store: None,
            concurrency: None,
        }
    }
}

impl PacingBuilder {
    /// The mean time between two probes of an endpoint that is down (the probe rate is its
    /// inverse, and a ramp starts from it).
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// How many probes may be in flight at once (at least 1).
    pub fn probes_in_flight(mut self, probes: u32) -> Self {
        self.probes_in_flight = probes;
        self
    }

    /// How many congestion outcomes in a row mark an open endpoint as down (at least 1).
    pub fn outage_after(mut self, outcomes: u32) -> Self {
        self.outage_after = outcomes;
        self
    }

    /// How often a ramp looks at its losses: the rate doubles at most once per interval.
    pub fn ramp_interval(mut self, interval: Duration) -> Self {
        self.ramp_interval = interval;
        self
    }

    /// The fraction of losses in an interval above which the rate is cut, in `[0, 1]`.
    pub fn loss_threshold(mut self, threshold: f64) -> Self {
        self.loss_threshold = threshold;
        self
    }

    /// How long the rate takes to regain, after a cut, the rate the endpoint accepted.
    pub fn regain(mut self, regain: Duration) -> Self {
        self.regain = regain;
        self
    }

    /// The most requests waiting for one endpoint (at least 1).
    pub fn max_waiters(mut self, waiters: usize) -> Self {
        self.max_waiters = waiters;
        self
    }

    /// The longest wait in an endpoint's queue a request joins it for, as the pacer predicts it
    /// (by default only the request's deadline bounds it). A request predicted to wait longer
    /// is deferred instead: with [`fail_unsent`](crate::retry::RetryLayerBuilder::fail_unsent), a
    /// first attempt is handed back at once with when to send it again, and a retry stops with
    /// [`StopReason::Deferred`](crate::StopReason::Deferred). For callers that have somewhere
    /// better to keep a request than the queue: a durable queue's worker, whose request held in
    /// the queue would hold one of its few slots, and the requests to healthy endpoints behind it.
    pub fn max_queue_wait(mut self, wait: Duration) -> Self {
        self.max_queue_wait = wait;
        self
    }

    /// The most endpoints with a state at once (at least 1): past it, the least recently used
    /// open endpoint with nobody waiting is forgotten (one counting failures in a row after the
    /// others); when none can be, a request to a new endpoint is not paced. The endpoints a
    /// [hedging layer](crate::hedge::HedgeLayerBuilder::retry_layer) keeps its latencies in
    /// count too.
    pub fn max_endpoints(mut self, endpoints: usize) -> Self {
        self.max_endpoints = endpoints;
        self
    }

    /// Whether a new request to an endpoint that is down waits in its queue (on by default).
    pub fn first_attempts(mut self, wait: bool) -> Self {
        self.first_attempts = wait;
        self
    }

    /// The statuses that mean "overloaded" (transient timeouts and connection failures always do).
    /// A transient status not in the list is retried but says nothing of the load. The classifier
    /// reads the list ([`Signals::congestion`](crate::classify::Signals::congestion)), and
    /// may say more: the gRPC crate's `GrpcClassifier` counts UNAVAILABLE and
    /// RESOURCE_EXHAUSTED, which arrive with HTTP status 200.
    pub fn congestion(mut self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.congestion = statuses.into_iter().collect();
        self
    }

    /// Paces every endpoint together with the other processes of a fleet, through `store`:
    /// one mode, one learned rate, one probe stream and fair shares of the releases for the
    /// whole fleet, instead of one of each per process. Every process of the fleet gives the
    /// same configuration and a handle on the same store (a
    /// `RedisStore` (crate `tower-http-retry-redis`) per process on one Redis, or
    /// [`InProcessStore::peer`](crate::pacing::store::InProcessStore::peer) handles for layers
    /// of one process).
    ///
    /// While an endpoint is open nothing changes: no call to the store is made on the request
    /// path (the store's cached view says whether the fleet paces it). While it is paced, the
    /// head of this layer's queue asks the store for releases in batches, and this layer's
    /// outcomes are reported with the next call; see [`store`](crate::pacing::store) for what
    /// is shared and what it costs, and what happens when the store fails (each process paces
    /// on at its last known share, never unlimited).
    pub fn store(mut self, store: impl PacingStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Limits each endpoint's requests in flight to a number learned from the latency of its
    /// answers ([`AdaptiveConcurrency`]): an endpoint that slows down without failing gets
    /// fewer requests at once, and those over its limit wait in its queue (with their deadline,
    /// and handed back unsent as the queue hands back any request it cannot take). Off by
    /// default. Every request to a paced layer's endpoints then passes through the endpoint's
    /// lock, as requests after an outage do.
    ///
    /// Turn away a request predicted to wait long with [`max_queue_wait`](Self::max_queue_wait),
    /// and bound the wait of one that joins with a deadline: without either, a request over the
    /// limit waits as long as it takes. Hand back what the queue turns away with
    /// [`fail_unsent`](crate::retry::RetryLayerBuilder::fail_unsent): without it, a first attempt
    /// the queue cannot take is sent all the same, as after an outage (counted in flight, over
    /// the limit). With
    /// the limit on, first attempts go through the queue whatever
    /// [`first_attempts`](Self::first_attempts) says.
    pub fn adaptive_concurrency(mut self, concurrency: AdaptiveConcurrency) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// Checks every value.
    ///
    /// Fails, naming the field, on a zero or over-long interval, a zero count, or a threshold
    /// outside `[0, 1]`.
    pub fn build(self) -> Result<Pacing, InvalidConfig> {
        positive_duration("pacing.probe_interval", self.probe_interval)?;
        positive_duration("pacing.ramp_interval", self.ramp_interval)?;
        positive_duration("pacing.regain", self.regain)?;
        at_least_one("pacing.probes_in_flight", self.probes_in_flight.into())?;
        at_least_one("pacing.outage_after", self.outage_after.into())?;
        at_least_one("pacing.max_waiters", self.max_waiters as u64)?;
        at_least_one("pacing.max_endpoints", self.max_endpoints as u64)?;
        in_range("pacing.loss_threshold", self.loss_threshold, 0.0, 1.0)?;
        if let Some(concurrency) = &self.concurrency {
            concurrency.check()?;
        }
        let floor = 1.0 / self.probe_interval.as_secs_f64();
        Ok(Pacing {
            rules: Arc::new(PacingRules {
                probe_interval: self.probe_interval,
                probes_in_flight: self.probes_in_flight,
                outage_after: self.outage_after,
                ramp_interval: self.ramp_interval,
                loss_threshold: self.loss_threshold,
                idle_to_open: Duration::from_secs(1).max(self.ramp_interval * 2),
                max_waiters: self.max_waiters,
                max_queue_wait: self.max_queue_wait,
                max_endpoints: self.max_endpoints,
                first_attempts: self.first_attempts,
                congestion: self.congestion,
                rate: RateConfig {
                    floor,
                    ceiling: 1e6_f64.max(floor),
                    decrease: DECREASE,
                    regain_secs: self.regain.as_secs_f64(),
                    additive: additive_increase(DECREASE, self.ramp_interval.as_secs_f64()),
                },
            }),
            store: self.store,
            concurrency: self.concurrency,
        })
    }
}
