//! The scenarios beyond one outage, each through the real layer against model B's
//! endpoint (2,000/s once up, a token bucket refilled every 10 ms):
//! * **flapping**: the endpoint fails again for [`Params::outage`] from the instant the first
//!   burst is delivered, when a second burst of the same size is sent; or it is down 1 s and up
//!   1 s in turns for 60 s;
//! * **redelivery**: a deadline on every request, and a durable queue that sends each
//!   undelivered, not final delivery again at its report's resend time (`resend_after`, as the
//!   redelivery snippet of docs/retrying.md does), through the same layer.

use crate::endpoint::{Downtime, Endpoint};
use crate::{webhook, Arrival, Bound, Check, Completion, Model, Params, Row};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service, ServiceExt};
use tower_http_retry::report::{RetryReport, StopReason};

const MODEL_B: Model = Model::Capacity { retry_after: false };

/// A flapping endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flap {
    /// Down for the outage, up at capacity, and down again for the outage from the instant the
    /// first burst is delivered, when a second burst of the same size is sent.
    SecondOutage,
    /// Down 1 s and up 1 s in turns for 60 s, then up; one burst at t = 0.
    UpDown,
}

impl Flap {
    /// Every flapping scenario, in table order.
    pub const ALL: [Flap; 2] = [Flap::SecondOutage, Flap::UpDown];

    /// A short name.
    pub fn label(self) -> &'static str {
        match self {
            Flap::SecondOutage => "a second outage as the first burst is delivered",
            Flap::UpDown => "1 s up / 1 s down for 60 s",
        }
    }

    /// The rows run in this scenario.
    pub fn rows(self) -> &'static [Row] {
        match self {
            Flap::SecondOutage => &[Row::Pacer],
            Flap::UpDown => &[Row::Pacer, Row::Full],
        }
    }
}

/// Down and up in turns for this long, [`FLAP_PERIOD`] each.
pub const FLAPPING_FOR: Duration = Duration::from_secs(60);
/// One turn of [`Flap::UpDown`].
pub const FLAP_PERIOD: Duration = Duration::from_secs(1);

/// Everything a flapping run produced.
#[derive(Debug)]
pub struct FlapRun {
    pub flap: Flap,
    pub arrivals: Vec<Arrival>,
    pub completions: Vec<Completion>,
    /// [`Flap::SecondOutage`]: when the second outage began (and the second burst was sent).
    pub second: Option<Duration>,
}

/// Runs `row` (one of ours) in `flap` with `seed`, on a fresh paused-clock runtime.
pub fn flap(p: &Params, flap: Flap, row: Row, seed: u64) -> FlapRun {
    runtime().block_on(async {
        let start = Instant::now();
        let second = Arc::new(Mutex::new(None));
        let downtime = match flap {
            Flap::SecondOutage => Downtime::Twice(Arc::clone(&second)),
            Flap::UpDown => Downtime::Alternating {
                period: FLAP_PERIOD,
                until: FLAPPING_FOR,
            },
        };
        let endpoint = Endpoint::with_downtime(p, MODEL_B, start, downtime, false);
        let layer = row.layer(p, seed).expect("one of our rows");
        let client = layer.layer(endpoint.clone());
        let mut completions = burst(&client, 0..p.deliveries, start).await;
        let mut second_at = None;
        if flap == Flap::SecondOutage {
            let at = start.elapsed();
            endpoint.start_second_outage(at);
            second_at = Some(at);
            let ids = p.deliveries..2 * p.deliveries;
            completions.extend(burst(&client, ids, start).await);
        }
        FlapRun {
            flap,
            arrivals: endpoint.take_arrivals(),
            completions,
            second: second_at,
        }
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// Sends the deliveries `ids` at once, each as its own task, and waits for all of them.
async fn burst<S>(client: &S, ids: std::ops::Range<usize>, start: Instant) -> Vec<Completion>
where
    S: Service<http::Request<String>, Response = http::Response<String>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut tasks = JoinSet::new();
    for id in ids {
        let client = client.clone();
        tasks.spawn(async move {
            let response = client
                .oneshot(webhook(id))
                .await
                .unwrap_or_else(|never| match never {});
            Completion {
                at: start.elapsed(),
                delivery: id,
                process: 0,
                delivered: response.status().is_success(),
            }
        });
    }
    tasks.join_all().await
}

/// The figures of one flapping run.
#[derive(Clone, Copy, Debug)]
pub struct FlapMetrics {
    pub flap: Flap,
    /// Share of the deliveries (of both bursts) that succeeded.
    pub delivered: f64,
    /// Attempts after the first that failed, over the whole run.
    pub failed_retries: u64,
    /// [`Flap::SecondOutage`]: failed retries while the first outage lasted, and while the
    /// second did.
    pub failed_in_outages: (u64, u64),
    /// [`Flap::SecondOutage`]: each burst's 99 % delivered, counted from the end of its outage.
    /// [`Flap::UpDown`]: 99 % delivered, counted from t = 0 (in the first field).
    pub t99: (Option<Duration>, Option<Duration>),
    /// Attempts that reached the endpoint while it was down.
    pub hits_while_down: u64,
    /// [`Flap::SecondOutage`]: attempts that reached it while the first outage lasted, and while
    /// the second did.
    pub hits_in_outages: (u64, u64),
    pub attempts: u64,
}

impl FlapMetrics {
    pub fn of(run: &FlapRun, p: &Params) -> Self {
        let failed_retry = |a: &&Arrival| !a.ok && a.attempt > 1;
        let outage = |from: Duration| from..from + p.outage;
        let failed_in = |window: std::ops::Range<Duration>| {
            run.arrivals
                .iter()
                .filter(failed_retry)
                .filter(|a| window.contains(&a.at))
                .count() as u64
        };
        let hits_in = |window: std::ops::Range<Duration>| {
            run.arrivals
                .iter()
                .filter(|a| window.contains(&a.at))
                .count() as u64
        };
        let hits_in_outages = match run.second {
            Some(second) => (hits_in(outage(Duration::ZERO)), hits_in(outage(second))),
            None => (0, 0),
        };
        let t99_of = |ids: std::ops::Range<usize>, from: Duration| {
            let mut done: Vec<Duration> = run
                .completions
                .iter()
                .filter(|c| c.delivered && ids.contains(&c.delivery))
                .map(|c| c.at)
                .collect();
            done.sort_unstable();
            let needed = (ids.len() * 99).div_ceil(100);
            done.get(needed.checked_sub(1)?)
                .map(|t| t.saturating_sub(from))
        };
        let n = p.deliveries;
        let (failed_in_outages, t99, down): (_, _, Box<dyn Fn(Duration) -> bool>) = match run.flap {
            Flap::SecondOutage => {
                let second = run.second.expect("a second outage");
                (
                    (failed_in(outage(Duration::ZERO)), failed_in(outage(second))),
                    (t99_of(0..n, p.outage), t99_of(n..2 * n, second + p.outage)),
                    Box::new(move |at| at < p.outage || outage(second).contains(&at)),
                )
            }
            Flap::UpDown => (
                (0, 0),
                (t99_of(0..n, Duration::ZERO), None),
                Box::new(|at: Duration| {
                    at < FLAPPING_FOR && (at.as_nanos() / FLAP_PERIOD.as_nanos()) % 2 == 0
                }),
            ),
        };
        Self {
            flap: run.flap,
            delivered: run.completions.iter().filter(|c| c.delivered).count() as f64
                / run.completions.len().max(1) as f64,
            failed_retries: run.arrivals.iter().filter(failed_retry).count() as u64,
            failed_in_outages,
            t99,
            hits_while_down: run.arrivals.iter().filter(|a| down(a.at)).count() as u64,
            hits_in_outages,
            attempts: run.arrivals.len() as u64,
        }
    }
}

/// The tighter flapping targets for one row (its seeds), judged on the mean.
/// `full_jitter_failed` is full jitter's mean failed retries in [`Flap::UpDown`].
pub fn flap_targets(p: &Params, metrics: &[FlapMetrics], full_jitter_failed: f64) -> Vec<Check> {
    let Some(first) = metrics.first() else {
        return Vec::new();
    };
    let bound = (p.drain_time() + crate::target::B_SLACK_19).as_secs_f64();
    match first.flap {
        Flap::SecondOutage => {
            let fresh = metrics
                .iter()
                .map(|m| m.failed_in_outages.0 as f64)
                .sum::<f64>()
                / metrics.len() as f64;
            let t99 = |f: fn(&FlapMetrics) -> Option<Duration>| {
                metrics
                    .iter()
                    .map(|m| f(m).map(|t| t.as_secs_f64()))
                    .collect()
            };
            vec![
                Check {
                    name: format!(
                        "failed retries in the second outage ≤ {:.0} (2 × the first's {fresh:.0})",
                        2.0 * fresh
                    ),
                    bound: Bound::AtMost(2.0 * fresh),
                    unit: "",
                    decimals: 0,
                    figures: metrics
                        .iter()
                        .map(|m| Some(m.failed_in_outages.1 as f64))
                        .collect(),
                    missing: String::new(),
                },
                Check {
                    name: format!("first burst: 99 % ≤ {bound:.1} s after its recovery"),
                    bound: Bound::AtMost(bound),
                    unit: " s",
                    decimals: 1,
                    figures: t99(|m| m.t99.0),
                    missing: "never".to_string(),
                },
                Check {
                    name: format!("second burst: 99 % ≤ {bound:.1} s after its recovery"),
                    bound: Bound::AtMost(bound),
                    unit: " s",
                    decimals: 1,
                    figures: t99(|m| m.t99.1),
                    missing: "never".to_string(),
                },
            ]
        }
        Flap::UpDown => {
            let bound = full_jitter_failed * 0.1;
            vec![
                Check {
                    name: "delivered ≥ 99 %".to_string(),
                    bound: Bound::AtLeast(99.0),
                    unit: " %",
                    decimals: 2,
                    figures: metrics.iter().map(|m| Some(m.delivered * 100.0)).collect(),
                    missing: String::new(),
                },
                Check {
                    name: format!(
                        "failed retries ≤ {bound:.0} (10 % of full jitter's {full_jitter_failed:.0})"
                    ),
                    bound: Bound::AtMost(bound),
                    unit: "",
                    decimals: 0,
                    figures: metrics.iter().map(|m| Some(m.failed_retries as f64)).collect(),
                    missing: String::new(),
                },
            ]
        }
    }
}

/// A deadline and a durable redelivery queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redelivery {
    /// The pacer row, no deadline: the reference for the hits while down.
    NoDeadline,
    /// The pacer row with [`Params::redelivery_deadline`] and `fail_unsent`.
    Deadline,
    /// The same, against an endpoint whose outage 503s announce the recovery (`Retry-After`
    /// with the seconds left): a pause the layer knows of.
    AnnouncedDeadline,
}

impl Redelivery {
    /// Every redelivery row, in table order.
    pub const ALL: [Redelivery; 3] = [
        Redelivery::NoDeadline,
        Redelivery::Deadline,
        Redelivery::AnnouncedDeadline,
    ];

    /// A short name.
    pub fn label(self) -> &'static str {
        match self {
            Redelivery::NoDeadline => "pacer, no deadline",
            Redelivery::Deadline => "pacer + deadline + `fail_unsent`",
            Redelivery::AnnouncedDeadline => {
                "pacer + deadline + `fail_unsent`, outage announced (`Retry-After`)"
            }
        }
    }
}

/// One stop the durable queue sends again.
#[derive(Clone, Copy, Debug)]
pub struct Resend {
    pub delivery: usize,
    /// 1 for the first resend of this delivery.
    pub round: u32,
    /// When the layer stopped, from the start.
    pub stopped: Duration,
    /// When the queue sends it again (`stopped` plus the report's `resend_after`).
    pub at: Duration,
    pub stop: StopReason,
    /// The stop was a request handed back unsent (no attempt).
    pub unsent: bool,
}

/// Everything a redelivery run produced.
#[derive(Debug)]
pub struct RedeliveryRun {
    pub kind: Redelivery,
    pub arrivals: Vec<Arrival>,
    /// How each delivery ended, after all its rounds.
    pub completions: Vec<Completion>,
    pub resends: Vec<Resend>,
    /// Deliveries dead-lettered (a final stop), or given up after [`Params::max_rounds`].
    pub dead_letters: u64,
}

/// Runs `kind` with `seed` on a fresh paused-clock runtime.
pub fn redeliver(p: &Params, kind: Redelivery, seed: u64) -> RedeliveryRun {
    runtime().block_on(async {
        let start = Instant::now();
        let announced = kind == Redelivery::AnnouncedDeadline;
        let endpoint = Endpoint::with_downtime(p, MODEL_B, start, Downtime::Once, announced);
        let builder = Row::Pacer.builder(p, seed).expect("one of ours");
        let below = endpoint
            .clone()
            .map_err(|never: Infallible| -> BoxError { match never {} });
        let client = match kind {
            Redelivery::NoDeadline => {
                tower::util::BoxCloneSyncService::new(builder.build().unwrap().layer(below))
            }
            Redelivery::Deadline | Redelivery::AnnouncedDeadline => {
                let layer = builder
                    .deadline(p.redelivery_deadline)
                    .fail_unsent()
                    .build()
                    .unwrap();
                tower::util::BoxCloneSyncService::new(layer.layer(below))
            }
        };
        let resends = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = JoinSet::new();
        for id in 0..p.deliveries {
            let client = client.clone();
            let resends = Arc::clone(&resends);
            let max_rounds = p.max_rounds;
            tasks.spawn(async move {
                let mut round = 0;
                loop {
                    let call = client.clone().oneshot(webhook(id));
                    let (result, report) = RetryReport::capture(call).await;
                    let delivered = matches!(&result, Ok(r) if r.status().is_success());
                    if delivered || report.stop.is_final() || round >= max_rounds {
                        return (
                            Completion {
                                at: start.elapsed(),
                                delivery: id,
                                process: 0,
                                delivered,
                            },
                            !delivered,
                        );
                    }
                    round += 1;
                    let after = report.resend_after.unwrap_or(Duration::from_secs(30));
                    let stopped = start.elapsed();
                    resends.lock().unwrap().push(Resend {
                        delivery: id,
                        round,
                        stopped,
                        at: stopped + after,
                        stop: report.stop,
                        unsent: report.attempts == 0,
                    });
                    tokio::time::sleep(after).await;
                }
            });
        }
        let mut completions = Vec::with_capacity(p.deliveries);
        let mut dead_letters = 0;
        while let Some(joined) = tasks.join_next().await {
            let (completion, dead) = joined.expect("a delivery task panicked");
            dead_letters += u64::from(dead);
            completions.push(completion);
        }
        let resends = std::mem::take(&mut *resends.lock().unwrap());
        RedeliveryRun {
            kind,
            arrivals: endpoint.take_arrivals(),
            completions,
            resends,
            dead_letters,
        }
    })
}

/// The figures of one redelivery run.
#[derive(Clone, Copy, Debug)]
pub struct RedeliveryMetrics {
    pub kind: Redelivery,
    /// Attempts that reached the endpoint while it was down.
    pub hits_while_down: u64,
    pub delivered: f64,
    /// 99 % delivered, and the last delivery, counted from recovery.
    pub t99: Option<Duration>,
    pub last: Option<Duration>,
    /// Resends by the durable queue, and how many of those stops were handed back unsent.
    pub resends: u64,
    pub unsent: u64,
    /// The first round: how many deliveries were sent again, and the spread of their resend
    /// times (latest minus earliest).
    pub first_round: u64,
    pub first_round_spread: Option<Duration>,
    /// Resend times that fell inside a pause the layer knew of when the request stopped (the
    /// announced outage), and resend times that fell inside the outage at all.
    pub inside_known_pause: u64,
    pub into_outage: u64,
    pub dead_letters: u64,
}

impl RedeliveryMetrics {
    pub fn of(run: &RedeliveryRun, p: &Params) -> Self {
        let mut done: Vec<Duration> = run
            .completions
            .iter()
            .filter(|c| c.delivered)
            .map(|c| c.at)
            .collect();
        done.sort_unstable();
        let needed = (p.deliveries * 99).div_ceil(100);
        let first: Vec<&Resend> = run.resends.iter().filter(|r| r.round == 1).collect();
        let spread = first
            .iter()
            .map(|r| r.at)
            .max()
            .zip(first.iter().map(|r| r.at).min())
            .map(|(max, min)| max - min);
        // The announcement reaches the layer with the first answer of the outage.
        let known = run.kind == Redelivery::AnnouncedDeadline;
        Self {
            kind: run.kind,
            hits_while_down: run.arrivals.iter().filter(|a| a.at < p.outage).count() as u64,
            delivered: done.len() as f64 / p.deliveries as f64,
            t99: needed
                .checked_sub(1)
                .and_then(|i| done.get(i))
                .map(|t| t.saturating_sub(p.outage)),
            last: done.last().map(|t| t.saturating_sub(p.outage)),
            resends: run.resends.len() as u64,
            unsent: run.resends.iter().filter(|r| r.unsent).count() as u64,
            first_round: first.len() as u64,
            first_round_spread: spread,
            inside_known_pause: run
                .resends
                .iter()
                .filter(|r| known && r.stopped >= p.latency && r.at < p.outage)
                .count() as u64,
            into_outage: run.resends.iter().filter(|r| r.at < p.outage).count() as u64,
            dead_letters: run.dead_letters,
        }
    }
}

/// The tighter redelivery targets for one row (its seeds), judged on the mean.
/// `reference_hits` is the no-deadline row's mean hits while down.
pub fn redelivery_targets(
    p: &Params,
    metrics: &[RedeliveryMetrics],
    reference_hits: f64,
) -> Vec<Check> {
    let rate = p.capacity_per_second as f64;
    let first_round =
        metrics.iter().map(|m| m.first_round as f64).sum::<f64>() / metrics.len().max(1) as f64;
    vec![
        Check {
            name: format!(
                "hits while down ≤ {reference_hits:.0} (as without a deadline: N + the probes)"
            ),
            bound: Bound::AtMost(reference_hits),
            unit: "",
            decimals: 0,
            figures: metrics
                .iter()
                .map(|m| Some(m.hits_while_down as f64))
                .collect(),
            missing: String::new(),
        },
        Check {
            name: format!(
                "first round's resend times spread ≥ {:.1} s ({first_round:.0} resends / {rate:.0}/s)",
                first_round / rate
            ),
            bound: Bound::AtLeast(first_round / rate),
            unit: " s",
            decimals: 1,
            figures: metrics
                .iter()
                .map(|m| m.first_round_spread.map(|d| d.as_secs_f64()))
                .collect(),
            missing: "no resend".to_string(),
        },
        Check {
            name: "resend times inside a known pause = 0".to_string(),
            bound: Bound::AtMost(0.0),
            unit: "",
            decimals: 0,
            figures: metrics
                .iter()
                .map(|m| Some(m.inside_known_pause as f64))
                .collect(),
            missing: String::new(),
        },
    ]
}
