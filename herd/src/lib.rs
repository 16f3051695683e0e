//! The herd simulation of tower-http-retry, used by `examples/herd/` (full size: tables,
//! targets and charts) and `tests/herd/main.rs` (small size: the qualitative facts), both in the
//! root package. A workspace member of its own (`publish = false`), so that both use it as a
//! crate.
//!
//! `deliveries` webhooks are sent at t = 0 to one in-process endpoint (a tower `Service`) that
//! fails completely during the outage and then recovers, either fully (model A) or up to a
//! capacity given by a token bucket (model B). Every response completes a fixed latency after its
//! call. Time is tokio's paused clock on a current-thread runtime, so a 10,000-client run takes
//! about a second and is exactly reproducible. Every row except the peer anchor goes through the
//! real [`RetryLayer`]; the anchor is `tower::retry::Retry` with `ExponentialBackoffMaker` and
//! `TpsBudget` (plus a second tower row without the budget, which shows what tower's backoff
//! alone does to a herd). The endpoint logs every arrival's virtual time, so every figure is
//! measured where the load lands, the same way for both crates.
//!
//! A run has one or more senders ("processes"): a fleet splits the deliveries between `n`
//! independent clients (each its own layer, random seed and budget) that share nothing but the
//! endpoint, as a fleet of uncoordinated senders does. [`fleet_store`] is the shared pacing
//! store for fleets that coordinate (an in-process store behind a simulated round trip).
//!
//! This file holds the parameters, the models, the rows and the runs; `endpoint.rs` the
//! simulated endpoint, `metrics.rs` what is measured and the targets, `scenario.rs` the
//! scenarios beyond one outage (flapping endpoints, a deadline with a redelivery queue).

pub mod fleet_store;

mod endpoint;
mod fleet;
mod metrics;
mod scenario;

pub use fleet::{
    fleet_targets, FleetRow, Sharing, StoreMetrics, StoreUse, FLEET_ROWS, OPEN_PHASE_RATE,
    STORE_RTT,
};

pub use metrics::{
    accepted_per_second, delivered_per_process, per_second, shares, spread, target, targets,
    targets_19, window_counts, Bound, Check, Metrics, RAMPED_SHARE,
};
pub use scenario::{
    flap, flap_targets, redeliver, redelivery_targets, Flap, FlapMetrics, FlapRun, Redelivery,
    RedeliveryMetrics, RedeliveryRun, Resend, FLAPPING_FOR, FLAP_PERIOD,
};

use endpoint::Endpoint;
use fleet_store::DelayedStore;
use http::header::HeaderName;
use http::{HeaderValue, Request, Response};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tower::retry::backoff::{
    Backoff as _, ExponentialBackoff, ExponentialBackoffMaker, MakeBackoff,
};
use tower::retry::budget::{Budget, TpsBudget};
use tower::retry::Policy;
use tower::{Layer, Service, ServiceExt};
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder, RetryStats, TokenBucket};
use tower_http_retry::{Backoff, Jitter, Pacing, RetryLayer, RetryReport, StopReason};

/// The header both clients stamp with the attempt number (1 for the first attempt).
pub const ATTEMPT: HeaderName = HeaderName::from_static("x-attempt");

/// Every parameter of the simulation, in one place; the harness prints them with the tables.
#[derive(Clone, Debug)]
pub struct Params {
    /// Webhooks sent, all at t = 0 (unless a row spreads them with first-attempt jitter).
    pub deliveries: usize,
    /// The endpoint fails every request from t = 0 to this (a whole number of seconds).
    pub outage: Duration,
    /// Every response completes this long after its call; the outcome is decided at the call.
    pub latency: Duration,
    /// Model B: successes per second after the outage, as the refill rate of a token bucket.
    pub capacity_per_second: u64,
    /// Model B: the bucket is refilled in steps of this length (`capacity_per_second * tick`
    /// tokens each), so the capacity is smooth at this granularity.
    pub capacity_tick: Duration,
    /// Model B: tokens the bucket holds at most (and holds when the outage ends).
    pub capacity_burst: u64,
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
    /// Senders in the fleet runs, each with `deliveries / fleet` deliveries.
    pub fleet: usize,
    /// The redelivery rows: every request's deadline (`RetryLayerBuilder::deadline`).
    pub redelivery_deadline: Duration,
    /// The redelivery rows: a delivery is given up after this many resends.
    pub max_rounds: u32,
}

impl Params {
    /// The scenario of the first targets, with parameters under which every backoff row spans the
    /// outage.
    pub fn harness() -> Self {
        Self {
            deliveries: 10_000,
            outage: Duration::from_secs(20),
            latency: Duration::from_millis(50),
            capacity_per_second: 2_000,
            capacity_tick: Duration::from_millis(10),
            // One refill: at most 20 successes in each 10-ms tick.
            capacity_burst: 20,
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
            fleet: 10,
            redelivery_deadline: Duration::from_secs(5),
            max_rounds: 50,
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

    /// Model B: tokens added per tick.
    pub fn tokens_per_tick(&self) -> u64 {
        let tokens = u128::from(self.capacity_per_second) * self.capacity_tick.as_nanos();
        assert!(
            tokens % 1_000_000_000 == 0 && tokens > 0,
            "the capacity must be a whole number of tokens per tick"
        );
        (tokens / 1_000_000_000) as u64
    }

    /// N/C: how long model B's capacity takes to serve every delivery once.
    pub fn drain_time(&self) -> Duration {
        Duration::from_secs_f64(self.deliveries as f64 / self.capacity_per_second as f64)
    }

    /// The backoff a row of ours uses (`Backoff::ceiling` of it gives each retry's bound).
    pub fn backoff(&self, jitter: Jitter) -> Backoff {
        Backoff::new(jitter, self.base, self.cap)
    }

    /// A fresh budget: each layer gets its own.
    pub fn token_bucket(&self) -> TokenBucket {
        TokenBucket::builder()
            .capacity(self.budget_burst)
            .refill_per_second(f64::from(self.budget_per_second))
            .deposit_per_success(f64::from(self.budget_ratio))
            .build()
            .expect("valid budget parameters")
    }

    /// The parameters and the metrics' definitions as a markdown list.
    pub fn describe(&self) -> String {
        let s = |d: Duration| format!("{:?}", d);
        let recovery = self.outage_secs();
        [
            format!(
                "- {} deliveries, all sent at t = 0 (first-attempt-jitter row: spread over U(0, {}))",
                self.deliveries,
                s(self.first_attempt_jitter)
            ),
            format!(
                "- endpoint: every response completes {} after its call (on the paused clock); \
                 the outcome is decided at the call, from the virtual time of the call",
                s(self.latency)
            ),
            format!(
                "- outage: every request gets 503 (no `Retry-After`) for t < {}; \"recovery\" is t = {}",
                s(self.outage),
                s(self.outage)
            ),
            "- model A: after the outage every request succeeds, at any rate".to_string(),
            format!(
                "- model B: after the outage a token bucket admits requests: {} tokens added every {} \
                 ({}/s), at most {} held, full at recovery; a request that finds no token gets 503 \
                 (B: without `Retry-After`; B+RA: `Retry-After: {}`); the capacity is smooth at {}, not \
                 a per-second window",
                self.tokens_per_tick(),
                s(self.capacity_tick),
                self.capacity_per_second,
                self.capacity_burst,
                self.retry_after_secs,
                s(self.capacity_tick)
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
                "- fleets: {} independent processes × {} deliveries, each its own layer (or tower policy) \
                 built from the row's configuration, with its own seed and its own budget; they share only \
                 the endpoint; delivery i is sent by process i mod {}, all at t = 0",
                self.fleet,
                self.deliveries / self.fleet.max(1),
                self.fleet
            ),
            format!(
                "- peaks: 1-s bins of arrival time at the endpoint; \"outage\" = [0, {recovery}) s, \
                 \"recovery\" = [{}, {}) s",
                self.recovery_secs().start,
                self.recovery_secs().end
            ),
            "- 99 % delivered: when the response that completed 99 % of the deliveries came back, \
             counted from recovery"
                .to_string(),
            "- failed retries: attempts after the first that were not answered 2xx (first attempts \
             are not counted)"
                .to_string(),
            "- overload 503s: 503s answered at or after recovery, all of them for lack of capacity \
             (none in model A)"
                .to_string(),
            format!(
                "- accepted/s once ramped (model B): successes per second from the start of the first \
                 1-s bin at or after recovery whose successes reach {:.0} % of capacity, to the call \
                 that completed 99 % of the deliveries (or the last success when 99 % never are)",
                RAMPED_SHARE * 100.0
            ),
            format!(
                "- fairness (fleets): each process's share of the deliveries completed in [recovery, \
                 recovery + N/C] = [{}, {}], divided by the fair share 1/{}; the table gives the \
                 smallest and the largest, the target the largest deviation from 1",
                s(self.outage),
                s(self.outage + self.drain_time()),
                self.fleet
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
    /// B: a token bucket admits `capacity_per_second`; a request without a token gets 503.
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

    /// The models the fleets run against (the fleet targets are model B's).
    pub const FLEET: [Model; 2] = [
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

    /// A shorter name.
    pub fn tag(self) -> &'static str {
        match self {
            Model::HardOutage => "A",
            Model::Capacity { retry_after: false } => "B",
            Model::Capacity { retry_after: true } => "B+RA",
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
    Pacer,
    PacerUngated,
}

impl Row {
    /// Every row, in table order.
    pub const ALL: [Row; 12] = [
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
        Row::Pacer,
        Row::PacerUngated,
    ];

    /// The rows drawn in the charts (requests/s and accepted/s over time).
    pub const CHARTED: [Row; 4] = [Row::Pacer, Row::Full, Row::Tower, Row::TowerBackoffOnly];

    /// The rows also run as a fleet of [`Params::fleet`] processes.
    pub const FLEET: [Row; 3] = [Row::Pacer, Row::FullBudget, Row::Full];

    /// The row the model-A failed-retries target is relative to.
    pub const REFERENCE: Row = Row::Full;

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
            Row::Pacer => "pacer (full jitter + budget + `Pacing::new()`)",
            Row::PacerUngated => "pacer, first attempts not gated",
        }
    }

    /// Whether this is one of our rows whose retries fire on randomly drawn delays (the pacer
    /// rows' retries wait in a queue and are released at a rate instead).
    pub fn is_jittered(self) -> bool {
        matches!(
            self,
            Row::Equal
                | Row::Full
                | Row::Decorrelated
                | Row::FullBudget
                | Row::DecorrelatedBudget
                | Row::FirstJitterFullBudget
        )
    }

    /// Our layer configured for this row, or `None` for tower's rows.
    pub fn layer(self, p: &Params, seed: u64) -> Option<RetryLayer> {
        let builder = self.builder(p, seed)?;
        Some(builder.build().expect("valid row configuration"))
    }

    /// The builder of our layer for this row (a scenario may add to it), or `None` for tower's
    /// rows. A new row of ours is one arm here: the common settings, then its own.
    pub fn builder(self, p: &Params, seed: u64) -> Option<RetryLayerBuilder> {
        let common = |backoff: Backoff| -> RetryLayerBuilder {
            RetryLayer::builder()
                .max_attempts(p.max_attempts)
                .backoff(backoff)
                .attempt_header(ATTEMPT)
                .random_source(RandomSource::seeded(seed))
        };
        let builder = match self {
            Row::NoBackoff => {
                common(Backoff::new(Jitter::None, p.immediate, p.immediate)).without_budget()
            }
            Row::Plain => common(p.backoff(Jitter::None)).without_budget(),
            Row::Equal => common(p.backoff(Jitter::Equal)).without_budget(),
            Row::Full => common(p.backoff(Jitter::Full)).without_budget(),
            Row::Decorrelated => common(p.backoff(Jitter::Decorrelated)).without_budget(),
            Row::FullBudget => common(p.backoff(Jitter::Full)).budget(p.token_bucket()),
            Row::DecorrelatedBudget => {
                common(p.backoff(Jitter::Decorrelated)).budget(p.token_bucket())
            }
            Row::FirstJitterFullBudget => common(p.backoff(Jitter::Full))
                .budget(p.token_bucket())
                .first_attempt_jitter(p.first_attempt_jitter),
            Row::Pacer => common(p.backoff(Jitter::Full))
                .budget(p.token_bucket())
                .pacing(Pacing::new()),
            Row::PacerUngated => common(p.backoff(Jitter::Full))
                .budget(p.token_bucket())
                .pacing(Pacing::builder().first_attempts(false).build().unwrap()),
            Row::Tower | Row::TowerBackoffOnly => return None,
        };
        Some(builder)
    }
}

/// One request as the endpoint saw it.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    /// Virtual time since the deliveries started.
    pub at: Duration,
    /// The delivery (from its `Idempotency-Key`).
    pub delivery: usize,
    /// The attempt number (from [`ATTEMPT`]; 1 when absent).
    pub attempt: u32,
    /// Whether it was answered 200.
    pub ok: bool,
}

/// How one delivery ended, as its caller saw it.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    pub at: Duration,
    pub delivery: usize,
    /// The sender (0 unless the run is a fleet).
    pub process: usize,
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
    pub model: Model,
    /// Senders: 1, or [`Params::fleet`] for a fleet.
    pub processes: usize,
    pub arrivals: Vec<Arrival>,
    pub completions: Vec<Completion>,
    /// Our rows only (tower reports nothing).
    pub delays: Vec<RealisedDelay>,
    /// Our rows only: each process's layer's counters.
    pub stats: Vec<RetryStats>,
    pub gave_up: GaveUp,
    /// A fleet with a shared store: what the processes asked of it.
    pub store: Option<StoreUse>,
}

/// Runs `row` against `model` with `seed`, one sender, on a fresh paused-clock runtime.
pub fn run(p: &Params, model: Model, row: Row, seed: u64) -> Run {
    run_fleet(p, model, row, seed, 1)
}

/// Runs `row` as `processes` independent senders sharing the endpoint, each with
/// `deliveries / processes` deliveries, its own layer, seed and budget.
pub fn run_fleet(p: &Params, model: Model, row: Row, seed: u64, processes: usize) -> Run {
    run_sharing(p, model, row, seed, processes, Sharing::Alone)
}

/// Runs `row` as `processes` senders sharing the endpoint and, with [`Sharing::Store`], one
/// pacing store, each with `deliveries / processes` deliveries, its own layer, seed and budget.
pub fn run_sharing(
    p: &Params,
    model: Model,
    row: Row,
    seed: u64,
    processes: usize,
    sharing: Sharing,
) -> Run {
    assert!(
        processes > 0 && p.deliveries % processes == 0,
        "every process gets the same number of deliveries"
    );
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
        .block_on(simulate(p, model, row, seed, processes, sharing))
}

/// Process `i`'s seed: `seed` itself for the first, so a one-process run is the plain row.
fn process_seed(seed: u64, process: usize) -> u64 {
    seed ^ ((process as u64) << 32)
}

async fn simulate(
    p: &Params,
    model: Model,
    row: Row,
    seed: u64,
    processes: usize,
    sharing: Sharing,
) -> Run {
    // Built inside the runtime: the budgets read the paused clock when created.
    let start = Instant::now();
    let endpoint = Endpoint::new(p, model, start);
    let seeds: Vec<u64> = (0..processes).map(|i| process_seed(seed, i)).collect();
    let stores = match sharing {
        Sharing::Alone => Vec::new(),
        Sharing::Store { rtt } => DelayedStore::fleet(processes, rtt),
    };
    let layers: Option<Vec<RetryLayer>> = seeds
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let builder = row.builder(p, s)?;
            let builder = match stores.get(i) {
                Some(store) => {
                    builder.pacing(Pacing::builder().store(store.clone()).build().unwrap())
                }
                None => builder,
            };
            Some(builder.build().expect("valid row configuration"))
        })
        .collect();
    let mut store = None;
    let (completions, delays, stats, gave_up) = match layers {
        Some(layers) => {
            let clients = layers.iter().map(|l| l.layer(endpoint.clone())).collect();
            let (completions, delays) = deliver(clients, p.deliveries, start).await;
            if !stores.is_empty() {
                store = Some(fleet::open_phase(&layers, &stores, &endpoint, start).await);
            }
            let stats: Vec<RetryStats> = layers.iter().map(RetryLayer::stats).collect();
            let stopped = |reason| stats.iter().map(|s| s.stopped(reason)).sum();
            let gave_up = GaveUp {
                budget: stopped(StopReason::BudgetEmpty),
                attempts: stopped(StopReason::AttemptsExhausted),
            };
            (completions, delays, stats, gave_up)
        }
        None => {
            let policies: Vec<TowerPolicy> = seeds
                .iter()
                .map(|&s| TowerPolicy::new(p, s, row == Row::Tower))
                .collect();
            let counters: Vec<_> = policies.iter().map(|p| Arc::clone(&p.gave_up)).collect();
            let clients = policies
                .into_iter()
                .map(|policy| tower::retry::Retry::new(policy, endpoint.clone()))
                .collect();
            let (completions, delays) = deliver(clients, p.deliveries, start).await;
            let count = |i: usize| counters.iter().map(|c| c[i].load(Ordering::Relaxed)).sum();
            let gave_up = GaveUp {
                budget: count(0),
                attempts: count(1),
            };
            (completions, delays, Vec::new(), gave_up)
        }
    };
    let mut arrivals = endpoint.take_arrivals();
    if !stats.is_empty() {
        // The layers' own count and the endpoint's log must agree, or the harness is wrong.
        let attempts: u64 = stats.iter().map(|s| s.attempts).sum();
        assert_eq!(attempts, arrivals.len() as u64, "attempts of {row:?}");
    }
    if let Some(store) = &store {
        // The open phase's requests are a figure of their own, not the run's.
        arrivals.retain(|a| a.delivery < p.deliveries);
        assert_eq!(
            store.open.sent, store.open.delivered,
            "the open phase delivers all"
        );
    }
    Run {
        model,
        processes,
        arrivals,
        completions,
        delays,
        stats,
        gave_up,
        store,
    }
}

/// Sends every delivery at once, each as its own task, delivery `i` by client `i mod n`, and
/// waits for all of them.
async fn deliver<S>(
    mut clients: Vec<S>,
    deliveries: usize,
    start: Instant,
) -> (Vec<Completion>, Vec<RealisedDelay>)
where
    S: Service<Request<String>, Response = Response<String>, Error = Infallible>,
    S::Future: Send + 'static,
{
    let processes = clients.len();
    let mut tasks = JoinSet::new();
    for id in 0..deliveries {
        let process = id % processes;
        let ready = clients[process]
            .ready()
            .await
            .unwrap_or_else(|never| match never {});
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
                delivery: id,
                process,
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
pub(crate) fn webhook(id: usize) -> Request<String> {
    Request::post("/hook")
        .header("idempotency-key", id)
        .body(String::new())
        .expect("a valid request")
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
