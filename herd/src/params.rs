//! Every parameter of the simulation.

use crate::RAMPED_SHARE;
use std::time::Duration;
use tower_http_retry::retry::TokenBucket;
use tower_http_retry::{Backoff, Jitter};

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
