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
pub mod knee;

mod endpoint;
mod fleet;
mod metrics;
mod params;
mod scenario;
mod tower_policy;

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
use http::{Request, Response};
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder, RetryStats};
use tower_http_retry::{Backoff, Jitter, Pacing, RetryLayer, RetryReport, StopReason};
use tower_policy::TowerPolicy;

pub use params::Params;

/// The header both clients stamp with the attempt number (1 for the first attempt).
pub const ATTEMPT: HeaderName = HeaderName::from_static("x-attempt");

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
