//! The herd simulation, shared by `examples/herd.rs` (full size: tables and charts) and
//! `tests/herd/main.rs` (small size: the qualitative facts).
//!
//! `deliveries` webhooks are sent at t = 0 to one in-process endpoint (a tower `Service`) that
//! fails completely during the outage and then recovers, either fully (model A) or up to a
//! capacity per second (model B). Time is tokio's paused clock on a current-thread runtime, so a
//! 10,000-client run takes milliseconds and is exactly reproducible. Every row except the peer
//! anchor goes through the real [`RetryLayer`]; the anchor is `tower::retry::Retry` with
//! `ExponentialBackoffMaker` and `TpsBudget` (plus a second tower row without the budget, which
//! shows what tower's backoff alone does to a herd). The endpoint logs every arrival's virtual
//! time, so every figure is measured where the load lands, the same way for both crates.
//!
//! Include it with `#[path = "../tests/herd/sim.rs"] mod sim;` (example) or `mod sim;` (test).

// The example and the test each use a different part of this file.
#![allow(dead_code)]

use http::header::HeaderName;
use http::{HeaderValue, Request, Response, StatusCode};
use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tower::retry::backoff::{
    Backoff as _, ExponentialBackoff, ExponentialBackoffMaker, MakeBackoff,
};
use tower::retry::budget::{Budget, TpsBudget};
use tower::retry::Policy;
use tower::{Layer, Service, ServiceExt};
use tower_http_retry::RetryStats;
use tower_http_retry::{
    Backoff, Jitter, RandomSource, RetryLayer, RetryReport, StopReason, TokenBucket,
};

/// The header both clients stamp with the attempt number (1 for the first attempt).
pub const ATTEMPT: HeaderName = HeaderName::from_static("x-attempt");

/// Every parameter of the simulation, in one place; the harness prints them with the tables.
#[derive(Clone, Debug)]
pub struct Params {
    /// Webhooks sent, all at t = 0 (unless a row spreads them with first-attempt jitter).
    pub deliveries: usize,
    /// The endpoint fails every request from t = 0 to this (a whole number of seconds).
    pub outage: Duration,
    /// Model B: successes per 1-s window after the outage; the excess gets 503.
    pub capacity_per_second: u64,
    /// Model B with `Retry-After`: the value (seconds) on each over-capacity 503.
    pub retry_after_secs: u64,
    /// Backoff base (the first exponential step) for every backing-off row, tower's included.
    pub base: Duration,
    /// Backoff cap for every row, tower's included.
    pub cap: Duration,
    /// Attempts per delivery, the first included, for every row.
    pub max_attempts: u32,
    /// "No backoff": `Jitter::None` with base = cap = this (`Backoff` rejects zero; tokio's
    /// timer resolution is 1 ms anyway).
    pub immediate: Duration,
    /// First attempts spread over `U(0, this)` in the first-attempt-jitter row.
    pub first_attempt_jitter: Duration,
    /// Budget: retries allowed at once (our bucket's capacity; tower's reserve is
    /// `budget_per_second * tower_ttl`, the same with the defaults).
    pub budget_burst: f64,
    /// Budget: retries per second allowed whatever the traffic (both crates).
    pub budget_per_second: u32,
    /// Budget: retries allowed per success (both crates).
    pub budget_ratio: f32,
    /// `TpsBudget`'s window.
    pub tower_ttl: Duration,
    /// `ExponentialBackoffMaker`'s jitter ratio (its `Default` uses 0.99).
    pub tower_jitter: f64,
}

impl Params {
    /// The scenario of issue 4, with parameters under which every backoff row spans the outage.
    pub fn harness() -> Self {
        Self {
            deliveries: 10_000,
            outage: Duration::from_secs(20),
            capacity_per_second: 2_000,
            retry_after_secs: 1,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
            max_attempts: 10,
            immediate: Duration::from_millis(1),
            first_attempt_jitter: Duration::from_secs(10),
            // Both crates' defaults: 20 % of successes + 10/s, 100 at once.
            budget_burst: 100.0,
            budget_per_second: 10,
            budget_ratio: 0.2,
            tower_ttl: Duration::from_secs(10),
            tower_jitter: 0.99,
        }
    }

    /// The same scenario with fewer deliveries.
    pub fn with_deliveries(mut self, deliveries: usize) -> Self {
        self.deliveries = deliveries;
        self
    }

    /// The first second after the outage (1-s bins).
    pub fn outage_secs(&self) -> usize {
        self.outage.as_secs() as usize
    }

    /// "Recovery" is `[outage, outage + cap)`: every client still retrying when the endpoint
    /// recovers sends its next attempt within one cap, so the herd it forms lands in there.
    pub fn recovery_secs(&self) -> std::ops::Range<usize> {
        self.outage_secs()..self.outage_secs() + self.cap.as_secs() as usize
    }

    /// The backoff a row of ours uses (`Backoff::ceiling` of it gives each retry's bound).
    pub fn backoff(&self, jitter: Jitter) -> Backoff {
        Backoff::new(jitter, self.base, self.cap)
    }

    fn token_bucket(&self) -> TokenBucket {
        TokenBucket::builder()
            .capacity(self.budget_burst)
            .refill_per_second(f64::from(self.budget_per_second))
            .deposit_per_success(f64::from(self.budget_ratio))
            .build()
            .expect("valid budget parameters")
    }

    /// The parameters as a markdown list.
    pub fn describe(&self) -> String {
        let s = |d: Duration| format!("{:?}", d);
        [
            format!(
                "- {} deliveries, all sent at t = 0 (first-attempt-jitter row: spread over U(0, {}))",
                self.deliveries,
                s(self.first_attempt_jitter)
            ),
            format!(
                "- outage: every request gets 503 (no `Retry-After`) for t < {}",
                s(self.outage)
            ),
            format!(
                "- model B: after the outage at most {} successes per 1-s window; the excess gets 503 \
                 (with `Retry-After: {}` in the B+RA variant)",
                self.capacity_per_second, self.retry_after_secs
            ),
            format!(
                "- backoff: base {}, cap {}, multiplier 2, {} attempts per delivery (first included), every row",
                s(self.base),
                s(self.cap),
                self.max_attempts
            ),
            format!("- no backoff: `Jitter::None`, base = cap = {}", s(self.immediate)),
            format!(
                "- budget (ours): `TokenBucket` capacity {}, {}/s refill, {} per success",
                self.budget_burst, self.budget_per_second, self.budget_ratio
            ),
            format!(
                "- tower::retry: `ExponentialBackoffMaker::new({}, {}, {}, rng)`, `TpsBudget::new({}, {}, {})`, \
                 same attempt limit, one seeded generator handed to the maker; 5xx retried, 2xx deposit; \
                 the \"backoff only\" row drops the budget",
                s(self.base),
                s(self.cap),
                self.tower_jitter,
                s(self.tower_ttl),
                self.budget_per_second,
                self.budget_ratio
            ),
            "- our rows: `RetryLayer` defaults otherwise (`Retry-After` honoured, clamped to the cap, +0-10 % jitter); \
             webhooks are POSTs with an `Idempotency-Key`"
                .to_string(),
            format!(
                "- rates in 1-s bins of arrival time at the endpoint; \"recovery\" = [{}, {}) s",
                self.recovery_secs().start,
                self.recovery_secs().end
            ),
        ]
        .join("\n")
    }
}

/// How the endpoint behaves after the outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// A: every request succeeds.
    HardOutage,
    /// B: at most `capacity_per_second` succeed per 1-s window; the excess gets 503.
    Capacity {
        /// Whether the over-capacity 503 carries `Retry-After`.
        retry_after: bool,
    },
}

impl Model {
    /// Every model, in table order.
    pub const ALL: [Model; 3] = [
        Model::HardOutage,
        Model::Capacity { retry_after: false },
        Model::Capacity { retry_after: true },
    ];

    /// A short name.
    pub fn label(self) -> &'static str {
        match self {
            Model::HardOutage => "A: hard outage",
            Model::Capacity { retry_after: false } => {
                "B: capacity-limited recovery, 503 without Retry-After"
            }
            Model::Capacity { retry_after: true } => {
                "B+RA: capacity-limited recovery, 503 with Retry-After"
            }
        }
    }
}

/// One retry configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Row {
    NoBackoff,
    Plain,
    Equal,
    Full,
    Decorrelated,
    FullBudget,
    DecorrelatedBudget,
    FirstJitterFullBudget,
    Tower,
    TowerBackoffOnly,
}

impl Row {
    /// Every row, in table order.
    pub const ALL: [Row; 10] = [
        Row::NoBackoff,
        Row::Plain,
        Row::Equal,
        Row::Full,
        Row::Decorrelated,
        Row::FullBudget,
        Row::DecorrelatedBudget,
        Row::FirstJitterFullBudget,
        Row::Tower,
        Row::TowerBackoffOnly,
    ];

    /// The rows drawn in the charts.
    pub const CHARTED: [Row; 6] = [
        Row::Plain,
        Row::Tower,
        Row::TowerBackoffOnly,
        Row::Full,
        Row::FullBudget,
        Row::DecorrelatedBudget,
    ];

    /// A short name.
    pub fn label(self) -> &'static str {
        match self {
            Row::NoBackoff => "no backoff",
            Row::Plain => "plain exponential",
            Row::Equal => "equal jitter",
            Row::Full => "full jitter",
            Row::Decorrelated => "decorrelated jitter",
            Row::FullBudget => "full jitter + budget",
            Row::DecorrelatedBudget => "decorrelated + budget",
            Row::FirstJitterFullBudget => "first-attempt jitter + full + budget",
            Row::Tower => "tower::retry (backoff + TpsBudget)",
            Row::TowerBackoffOnly => "tower::retry, backoff only",
        }
    }

    /// Our rows' settings: jitter, budget, first-attempt jitter; `None` for tower's rows.
    fn settings(self) -> Option<(Jitter, bool, bool)> {
        Some(match self {
            Row::NoBackoff | Row::Plain => (Jitter::None, false, false),
            Row::Equal => (Jitter::Equal, false, false),
            Row::Full => (Jitter::Full, false, false),
            Row::Decorrelated => (Jitter::Decorrelated, false, false),
            Row::FullBudget => (Jitter::Full, true, false),
            Row::DecorrelatedBudget => (Jitter::Decorrelated, true, false),
            Row::FirstJitterFullBudget => (Jitter::Full, true, true),
            Row::Tower | Row::TowerBackoffOnly => return None,
        })
    }

    /// Whether this is one of our rows with random delays.
    pub fn is_jittered(self) -> bool {
        matches!(self.settings(), Some((jitter, ..)) if jitter != Jitter::None)
    }

    /// Our layer configured for this row, or `None` for tower's rows.
    pub fn layer(self, p: &Params, seed: u64) -> Option<RetryLayer> {
        let (jitter, budget, first_attempt) = self.settings()?;
        let backoff = match self {
            Row::NoBackoff => Backoff::new(Jitter::None, p.immediate, p.immediate),
            _ => p.backoff(jitter),
        };
        let mut builder = RetryLayer::builder()
            .max_attempts(p.max_attempts)
            .backoff(backoff)
            .attempt_header(ATTEMPT)
            .random_source(RandomSource::seeded(seed));
        builder = if budget {
            builder.budget(p.token_bucket())
        } else {
            builder.without_budget()
        };
        if first_attempt {
            builder = builder.first_attempt_jitter(p.first_attempt_jitter);
        }
        Some(builder.build().expect("valid row configuration"))
    }
}

/// One request as the endpoint saw it.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    /// Virtual time since the deliveries started.
    pub at: Duration,
    /// The attempt number (from [`ATTEMPT`]; 1 when absent).
    pub attempt: u32,
    /// Whether it was answered 200.
    pub ok: bool,
}

/// How one delivery ended, as its caller saw it.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    pub at: Duration,
    pub delivered: bool,
}

/// A delay our layer slept before retry `retry` (1 for the first retry), from its report.
#[derive(Clone, Copy, Debug)]
pub struct RealisedDelay {
    pub retry: u32,
    pub delay: Duration,
}

/// Why undelivered deliveries stopped.
#[derive(Clone, Copy, Debug, Default)]
pub struct GaveUp {
    pub budget: u64,
    pub attempts: u64,
}

/// Everything one run produced.
#[derive(Debug)]
pub struct Run {
    pub arrivals: Vec<Arrival>,
    pub completions: Vec<Completion>,
    /// Our rows only (tower reports nothing).
    pub delays: Vec<RealisedDelay>,
    /// Our rows only.
    pub stats: Option<RetryStats>,
    pub gave_up: GaveUp,
}

/// Runs `row` against `model` with `seed`, on a fresh paused-clock runtime.
pub fn run(p: &Params, model: Model, row: Row, seed: u64) -> Run {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
        .block_on(simulate(p, model, row, seed))
}

async fn simulate(p: &Params, model: Model, row: Row, seed: u64) -> Run {
    // Built inside the runtime: the budgets read the paused clock when created.
    let start = Instant::now();
    let endpoint = Endpoint::new(p, model, start);
    let n = p.deliveries;
    let (completions, delays, stats, gave_up) = match row.layer(p, seed) {
        Some(layer) => {
            let (completions, delays) = deliver(layer.layer(endpoint.clone()), n, start).await;
            let stats = layer.stats();
            let gave_up = GaveUp {
                budget: stats.stopped(StopReason::BudgetEmpty),
                attempts: stats.stopped(StopReason::AttemptsExhausted),
            };
            (completions, delays, Some(stats), gave_up)
        }
        None => {
            let policy = TowerPolicy::new(p, seed, row == Row::Tower);
            let counters = Arc::clone(&policy.gave_up);
            let client = tower::retry::Retry::new(policy, endpoint.clone());
            let (completions, delays) = deliver(client, n, start).await;
            let gave_up = GaveUp {
                budget: counters[0].load(Ordering::Relaxed),
                attempts: counters[1].load(Ordering::Relaxed),
            };
            (completions, delays, None, gave_up)
        }
    };
    let arrivals = endpoint.take_arrivals();
    if let Some(stats) = &stats {
        // The layer's own count and the endpoint's log must agree, or the harness is wrong.
        assert_eq!(stats.attempts, arrivals.len() as u64, "attempts of {row:?}");
    }
    Run {
        arrivals,
        completions,
        delays,
        stats,
        gave_up,
    }
}

/// Sends every delivery at once, each as its own task, and waits for all of them.
async fn deliver<S>(
    mut client: S,
    deliveries: usize,
    start: Instant,
) -> (Vec<Completion>, Vec<RealisedDelay>)
where
    S: Service<Request<String>, Response = Response<String>, Error = Infallible>,
    S::Future: Send + 'static,
{
    let mut tasks = JoinSet::new();
    for id in 0..deliveries {
        let ready = client.ready().await.unwrap_or_else(|never| match never {});
        let response = ready.call(webhook(id));
        tasks.spawn(async move {
            let response = response.await.unwrap_or_else(|never| match never {});
            let delays: Vec<RealisedDelay> = RetryReport::of(&response)
                .delays
                .iter()
                .filter(|d| d.after_attempt > 0)
                .map(|d| RealisedDelay {
                    retry: d.after_attempt,
                    delay: d.duration,
                })
                .collect();
            let completion = Completion {
                at: start.elapsed(),
                delivered: response.status().is_success(),
            };
            (completion, delays)
        });
    }
    let mut completions = Vec::with_capacity(deliveries);
    let mut delays = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (completion, realised) = joined.expect("a delivery task panicked");
        completions.push(completion);
        delays.extend(realised);
    }
    (completions, delays)
}

/// A webhook: a POST that carries its own idempotency key, so retrying it is safe.
fn webhook(id: usize) -> Request<String> {
    Request::post("/hook")
        .header("idempotency-key", id)
        .body(String::new())
        .expect("a valid request")
}

/// The endpoint: answers at once, from the virtual time of the call.
#[derive(Clone)]
struct Endpoint {
    state: Arc<Mutex<EndpointState>>,
    model: Model,
    outage: Duration,
    capacity: u64,
    retry_after: HeaderValue,
}

struct EndpointState {
    start: Instant,
    arrivals: Vec<Arrival>,
    /// Model B: the 1-s window being counted, and its successes so far.
    window: u64,
    served: u64,
}

impl Endpoint {
    fn new(p: &Params, model: Model, start: Instant) -> Self {
        Self {
            state: Arc::new(Mutex::new(EndpointState {
                start,
                arrivals: Vec::with_capacity(p.deliveries * 4),
                window: 0,
                served: 0,
            })),
            model,
            outage: p.outage,
            capacity: p.capacity_per_second,
            retry_after: HeaderValue::from(p.retry_after_secs),
        }
    }

    fn take_arrivals(&self) -> Vec<Arrival> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut state.arrivals)
    }
}

impl Service<Request<String>> for Endpoint {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<String>) -> Self::Future {
        let attempt = request
            .headers()
            .get(&ATTEMPT)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let at = state.start.elapsed();
        let recovered = at >= self.outage;
        let ok = recovered
            && match self.model {
                Model::HardOutage => true,
                Model::Capacity { .. } => {
                    let window = at.as_secs();
                    if window != state.window {
                        state.window = window;
                        state.served = 0;
                    }
                    state.served < self.capacity && {
                        state.served += 1;
                        true
                    }
                }
            };
        state.arrivals.push(Arrival { at, attempt, ok });
        drop(state);
        let mut response = Response::new(String::new());
        if !ok {
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            if recovered && self.model == (Model::Capacity { retry_after: true }) {
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, self.retry_after.clone());
            }
        }
        ready(Ok(response))
    }
}

/// The `tower::retry::Policy` a user of tower writes: 5xx is retried up to the attempt limit if
/// the budget allows (withdraw on failure, deposit on success, as `tower::retry::budget`'s docs
/// show), sleeping what the session's `ExponentialBackoff` says.
///
/// `tower::retry::Retry` clones the policy for every request session, so each session starts from
/// the same `ExponentialBackoff`, random generator included: that is how tower is used, and why
/// its jitter does not spread a herd.
#[derive(Clone)]
struct TowerPolicy {
    backoff: ExponentialBackoff<SplitMix>,
    budget: Option<Arc<TpsBudget>>,
    attempts: u32,
    max_attempts: u32,
    /// Deliveries given up because the budget was empty, and because attempts ran out.
    gave_up: Arc<[AtomicU64; 2]>,
}

impl TowerPolicy {
    fn new(p: &Params, seed: u64, budget: bool) -> Self {
        let mut maker = ExponentialBackoffMaker::new(p.base, p.cap, p.tower_jitter, SplitMix(seed))
            .expect("valid tower backoff");
        Self {
            backoff: maker.make_backoff(),
            budget: budget.then(|| {
                Arc::new(TpsBudget::new(
                    p.tower_ttl,
                    p.budget_per_second,
                    p.budget_ratio,
                ))
            }),
            attempts: 1,
            max_attempts: p.max_attempts,
            gave_up: Arc::default(),
        }
    }
}

impl Policy<Request<String>, Response<String>, Infallible> for TowerPolicy {
    type Future = Sleep;

    fn retry(
        &mut self,
        request: &mut Request<String>,
        result: &mut Result<Response<String>, Infallible>,
    ) -> Option<Sleep> {
        let response = match result {
            Ok(response) => response,
            Err(never) => match *never {},
        };
        if response.status().is_success() {
            if let Some(budget) = &self.budget {
                budget.deposit();
            }
            return None;
        }
        if !response.status().is_server_error() {
            return None;
        }
        if self.attempts >= self.max_attempts {
            self.gave_up[1].fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self
            .budget
            .as_ref()
            .is_some_and(|budget| !budget.withdraw())
        {
            self.gave_up[0].fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.attempts += 1;
        request
            .headers_mut()
            .insert(ATTEMPT, HeaderValue::from(self.attempts));
        Some(self.backoff.next_backoff())
    }

    fn clone_request(&mut self, request: &Request<String>) -> Option<Request<String>> {
        Some(request.clone())
    }
}

/// A seeded generator for tower's backoff (splitmix64), so tower's row is reproducible too.
/// tower's default, `HasherRng::default()`, would behave the same way (one generator, cloned
/// into every session), only with a different draw each run.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl tower::util::rng::Rng for SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Arrivals per 1-s bin of virtual time, from t = 0 to the last arrival.
pub fn per_second(arrivals: &[Arrival]) -> Vec<u64> {
    let mut bins = Vec::new();
    for arrival in arrivals {
        let bin = arrival.at.as_secs() as usize;
        if bins.len() <= bin {
            bins.resize(bin + 1, 0);
        }
        bins[bin] += 1;
    }
    bins
}

/// The columns of the table, for one run.
#[derive(Clone, Copy, Debug)]
pub struct Metrics {
    /// Highest 1-s bin before the endpoint recovers.
    pub peak_outage: u64,
    /// Highest 1-s bin in [`Params::recovery_secs`].
    pub peak_recovery: u64,
    /// When 99 % of the deliveries had succeeded (`None`: never).
    pub t99: Option<Duration>,
    /// Share of deliveries that succeeded.
    pub delivered: f64,
    /// Attempts that failed (503).
    pub wasted: u64,
    /// Attempts sent.
    pub attempts: u64,
    pub gave_up: GaveUp,
}

impl Metrics {
    pub fn of(run: &Run, p: &Params) -> Self {
        let bins = per_second(&run.arrivals);
        let peak = |range: std::ops::Range<usize>| {
            bins.get(range.start.min(bins.len())..range.end.min(bins.len()))
                .and_then(|b| b.iter().copied().max())
                .unwrap_or(0)
        };
        let mut delivered: Vec<Duration> = run
            .completions
            .iter()
            .filter(|c| c.delivered)
            .map(|c| c.at)
            .collect();
        delivered.sort_unstable();
        let needed = (p.deliveries * 99).div_ceil(100);
        Self {
            peak_outage: peak(0..p.outage_secs()),
            peak_recovery: peak(p.recovery_secs()),
            t99: needed
                .checked_sub(1)
                .and_then(|i| delivered.get(i).copied()),
            delivered: delivered.len() as f64 / p.deliveries as f64,
            wasted: run.arrivals.iter().filter(|a| !a.ok).count() as u64,
            attempts: run.arrivals.len() as u64,
            gave_up: run.gave_up,
        }
    }
}
