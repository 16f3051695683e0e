//! What the harness measures in a run, and the targets it judges the figures against: the
//! first for every row, the tighter for the pacer.

use crate::{Arrival, GaveUp, Model, Params, Row, Run};
use std::time::Duration;

/// Arrivals per 1-s bin of virtual time, from t = 0 to the last arrival.
pub fn per_second(arrivals: &[Arrival]) -> Vec<u64> {
    bins(arrivals.iter().map(|a| a.at))
}

/// Arrivals answered 2xx per 1-s bin of virtual time.
pub fn accepted_per_second(arrivals: &[Arrival]) -> Vec<u64> {
    bins(arrivals.iter().filter(|a| a.ok).map(|a| a.at))
}

/// Deliveries completed per process, per 1-s bin of completion time.
pub fn delivered_per_process(run: &Run) -> Vec<Vec<u64>> {
    (0..run.processes)
        .map(|process| {
            bins(
                run.completions
                    .iter()
                    .filter(|c| c.delivered && c.process == process)
                    .map(|c| c.at),
            )
        })
        .collect()
}

fn bins(times: impl Iterator<Item = Duration>) -> Vec<u64> {
    let mut bins = Vec::new();
    for at in times {
        let bin = at.as_secs() as usize;
        if bins.len() <= bin {
            bins.resize(bin + 1, 0);
        }
        bins[bin] += 1;
    }
    bins
}

/// "Ramped": the first 1-s bin after recovery whose successes reach this share of capacity.
pub const RAMPED_SHARE: f64 = 0.5;

/// The columns of the table, for one run.
#[derive(Clone, Copy, Debug)]
pub struct Metrics {
    pub model: Model,
    pub processes: usize,
    /// Highest 1-s bin before the endpoint recovers.
    pub peak_outage: u64,
    /// Highest 1-s bin in [`Params::recovery_secs`].
    pub peak_recovery: u64,
    /// Highest 1-s bin of successes (2xx).
    pub peak_accepted: u64,
    /// When 99 % of the deliveries had succeeded (`None`: never).
    pub t99: Option<Duration>,
    /// The same, counted from recovery.
    pub t99_after_recovery: Option<Duration>,
    /// Share of deliveries that succeeded.
    pub delivered: f64,
    /// Attempts that failed (503), first attempts included.
    pub wasted: u64,
    /// Attempts after the first that failed.
    pub failed_retries: u64,
    /// 503s answered at or after recovery: for lack of capacity (model B only).
    pub overload: u64,
    /// Attempts after the first that reached the endpoint while it was down, per second of
    /// the outage: the load on a dead endpoint beyond the first attempts.
    pub retries_while_down: f64,
    /// Model B: mean successes per second once ramped (see [`Params::describe`]); `None` in
    /// model A, and when the successes never reach [`RAMPED_SHARE`] of capacity in a second.
    pub accepted_rate: Option<f64>,
    /// Attempts sent.
    pub attempts: u64,
    pub gave_up: GaveUp,
    /// Fleets: the smallest and largest share of the deliveries completed in
    /// [recovery, recovery + N/C], relative to the fair share (1.0 = fair); `None` for one
    /// process, or when none completed in the window.
    pub shares: Option<(f64, f64)>,
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
        let t99 = needed
            .checked_sub(1)
            .and_then(|i| delivered.get(i).copied());
        let accepted_rate = match run.model {
            Model::HardOutage => None,
            Model::Capacity { .. } => ramped_rate(run, p, t99),
        };
        Self {
            model: run.model,
            processes: run.processes,
            peak_outage: peak(0..p.outage_secs()),
            peak_recovery: peak(p.recovery_secs()),
            peak_accepted: accepted_per_second(&run.arrivals)
                .into_iter()
                .max()
                .unwrap_or(0),
            t99,
            t99_after_recovery: t99.map(|t| t.saturating_sub(p.outage)),
            delivered: delivered.len() as f64 / p.deliveries as f64,
            wasted: run.arrivals.iter().filter(|a| !a.ok).count() as u64,
            failed_retries: run
                .arrivals
                .iter()
                .filter(|a| !a.ok && a.attempt > 1)
                .count() as u64,
            overload: run
                .arrivals
                .iter()
                .filter(|a| !a.ok && a.at >= p.outage)
                .count() as u64,
            retries_while_down: run
                .arrivals
                .iter()
                .filter(|a| a.attempt > 1 && a.at < p.outage)
                .count() as f64
                / p.outage.as_secs_f64(),
            accepted_rate,
            attempts: run.arrivals.len() as u64,
            gave_up: run.gave_up,
            shares: shares(run, p).map(|shares| {
                let min = shares.iter().copied().fold(f64::INFINITY, f64::min);
                let max = shares.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (min, max)
            }),
        }
    }
}

/// Successes per second from the start of the first 1-s bin at or after recovery with
/// [`RAMPED_SHARE`] of capacity, to the call whose response completed 99 % of the deliveries
/// (its completion minus the latency), or to the last success when 99 % never are.
fn ramped_rate(run: &Run, p: &Params, t99: Option<Duration>) -> Option<f64> {
    let accepted = accepted_per_second(&run.arrivals);
    let threshold = p.capacity_per_second as f64 * RAMPED_SHARE;
    let ramped = (p.outage_secs()..accepted.len()).find(|&s| accepted[s] as f64 >= threshold)?;
    let from = Duration::from_secs(ramped as u64);
    let until = match t99 {
        Some(t99) => t99.saturating_sub(p.latency),
        None => run.arrivals.iter().filter(|a| a.ok).map(|a| a.at).max()?,
    };
    let successes = run
        .arrivals
        .iter()
        .filter(|a| a.ok && a.at >= from && a.at <= until)
        .count();
    (until > from).then(|| successes as f64 / (until - from).as_secs_f64())
}

/// Deliveries each process completed in [recovery, recovery + N/C].
pub fn window_counts(run: &Run, p: &Params) -> Vec<u64> {
    let window = p.outage..=p.outage + p.drain_time();
    let mut counts = vec![0; run.processes];
    for c in &run.completions {
        if c.delivered && window.contains(&c.at) {
            counts[c.process] += 1;
        }
    }
    counts
}

/// Each process's share of [`window_counts`], relative to the fair share (1.0 = fair); `None`
/// for one process or an empty window.
pub fn shares(run: &Run, p: &Params) -> Option<Vec<f64>> {
    let counts = window_counts(run, p);
    let total: u64 = counts.iter().sum();
    (run.processes > 1 && total > 0).then(|| {
        counts
            .iter()
            .map(|&c| c as f64 * run.processes as f64 / total as f64)
            .collect()
    })
}

/// "mean (min–max)", or just the value when every value is the same at `decimals`.
pub fn spread(values: &[f64], decimals: usize) -> String {
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max - min < 0.5 * 10f64.powi(-(decimals as i32)) {
        format!("{mean:.decimals$}")
    } else {
        format!("{mean:.decimals$} ({min:.decimals$}–{max:.decimals$})")
    }
}

/// The first targets.
pub mod target {
    use std::time::Duration;

    /// Model A: failed retries at most this share of full jitter's.
    pub const FAILED_RETRIES_OF_REFERENCE: f64 = 0.01;
    /// Model A: 99 % delivered within this of recovery.
    pub const A_DELIVERED_WITHIN: Duration = Duration::from_secs(3);
    /// Model B: 99 % delivered within N/C plus this of recovery.
    pub const B_SLACK: Duration = Duration::from_secs(3);
    /// Model B: overload 503s after recovery at most this share of N.
    pub const OVERLOAD_OF_DELIVERIES: f64 = 0.05;
    /// Model B: accepted rate once ramped at least this share of capacity.
    pub const ACCEPTED_OF_CAPACITY: f64 = 0.8;
    /// Fleets: every process's share within this of the fair share.
    pub const FAIR_SHARE_TOLERANCE: f64 = 0.25;

    /// Model B: 99 % delivered within N/C plus this of recovery.
    pub const B_SLACK_19: Duration = Duration::from_millis(1500);
    /// Model B: overload 503s at most this share of N.
    pub const B_OVERLOAD_19: f64 = 0.01;
    /// Model B+RA: 99 % delivered within N/C plus this of recovery.
    pub const B_RA_SLACK_19: Duration = Duration::from_secs(2);
    /// Model B+RA: overload 503s at most this share of N.
    pub const B_RA_OVERLOAD_19: f64 = 0.02;
    /// Model B+RA: accepted rate once ramped at least this share of capacity.
    pub const B_RA_ACCEPTED_19: f64 = 0.9;
}

/// Which side of its bound a figure must be on.
#[derive(Clone, Copy, Debug)]
pub enum Bound {
    AtMost(f64),
    AtLeast(f64),
}

/// One target, judged on every seed's figure.
#[derive(Clone, Debug)]
pub struct Check {
    /// The target with its bound, e.g. "failed retries ≤ 598 (1 % of full jitter's 59768)".
    pub name: String,
    pub bound: Bound,
    /// Printed after each figure (" s", " %", "").
    pub unit: &'static str,
    pub decimals: usize,
    /// One per seed; `None` when the event never happened (a miss).
    pub figures: Vec<Option<f64>>,
    /// What `None` means, e.g. "never".
    pub missing: String,
}

impl Check {
    fn passes(&self, figure: Option<f64>) -> bool {
        match (figure, self.bound) {
            (None, _) => false,
            (Some(f), Bound::AtMost(b)) => f <= b,
            (Some(f), Bound::AtLeast(b)) => f >= b,
        }
    }

    /// Seeds on which the target is met.
    pub fn met(&self) -> usize {
        self.figures.iter().filter(|&&f| self.passes(f)).count()
    }

    /// Judged on the mean of the seeds' figures (a seed without one is a miss): "met: 2.1
    /// (2.0–2.3) s", "missed by 0.4 s: 7.4 (7.1–7.6) s".
    pub fn mean_verdict(&self) -> String {
        let seen: Vec<f64> = self.figures.iter().flatten().copied().collect();
        if seen.len() < self.figures.len() || seen.is_empty() {
            return format!("missed: {} in some seeds", self.missing);
        }
        let mean = seen.iter().sum::<f64>() / seen.len() as f64;
        let figure = format!("{}{}", spread(&seen, self.decimals), self.unit);
        let d = self.decimals;
        match self.bound {
            Bound::AtMost(b) if mean > b => {
                format!("missed by {:.d$}{}: {figure}", mean - b, self.unit)
            }
            Bound::AtLeast(b) if mean < b => {
                format!("missed by {:.d$}{}: {figure}", b - mean, self.unit)
            }
            _ => format!("met: {figure}"),
        }
    }

    /// "met: 2.1 s", "missed by 44.5 s: 47.5 s (47.4–47.6)", "met in 2 of 3 seeds: ...".
    pub fn verdict(&self) -> String {
        let seeds = self.figures.len();
        let seen: Vec<f64> = self.figures.iter().flatten().copied().collect();
        let never = seeds - seen.len();
        let mut figure = if seen.is_empty() {
            self.missing.to_string()
        } else {
            format!("{}{}", spread(&seen, self.decimals), self.unit)
        };
        if never > 0 && !seen.is_empty() {
            figure += &format!("; {} in {never} of {seeds} seeds", self.missing);
        }
        let d = self.decimals;
        match self.met() {
            met if met == seeds => format!("met: {figure}"),
            0 if seen.is_empty() => format!("missed: {figure}"),
            0 => {
                let by = seen
                    .iter()
                    .map(|f| match self.bound {
                        Bound::AtMost(b) => f - b,
                        Bound::AtLeast(b) => b - f,
                    })
                    .sum::<f64>()
                    / seen.len() as f64;
                format!("missed by {by:.d$}{}: {figure}", self.unit)
            }
            met => format!("met in {met} of {seeds} seeds: {figure}"),
        }
    }
}

/// The first targets that apply to `metrics` (one row, one entry per seed): model A's,
/// model B's, and for fleets the fair-share one. `reference_failed_retries` is full jitter's
/// mean in model A.
pub fn targets(
    p: &Params,
    metrics: &[Metrics],
    reference_failed_retries: Option<f64>,
) -> Vec<Check> {
    use target::*;
    let Some(first) = metrics.first() else {
        return Vec::new();
    };
    let t99 = metrics
        .iter()
        .map(|m| m.t99_after_recovery.map(|t| t.as_secs_f64()))
        .collect();
    let mut checks = Vec::new();
    match first.model {
        Model::HardOutage => {
            if let Some(reference) = reference_failed_retries {
                let bound = reference * FAILED_RETRIES_OF_REFERENCE;
                checks.push(Check {
                    name: format!(
                        "failed retries ≤ {bound:.0} ({:.0} % of {}'s {reference:.0})",
                        FAILED_RETRIES_OF_REFERENCE * 100.0,
                        Row::REFERENCE.label()
                    ),
                    bound: Bound::AtMost(bound),
                    unit: "",
                    decimals: 0,
                    figures: metrics
                        .iter()
                        .map(|m| Some(m.failed_retries as f64))
                        .collect(),
                    missing: String::new(),
                });
            }
            let bound = A_DELIVERED_WITHIN.as_secs_f64();
            checks.push(Check {
                name: format!("99 % delivered ≤ {bound:.1} s after recovery"),
                bound: Bound::AtMost(bound),
                unit: " s",
                decimals: 1,
                figures: t99,
                missing: "never".to_string(),
            });
        }
        Model::Capacity { .. } => {
            let bound = (p.drain_time() + B_SLACK).as_secs_f64();
            checks.push(Check {
                name: format!(
                    "99 % delivered ≤ {bound:.1} s after recovery (N/C + {:.0} s)",
                    B_SLACK.as_secs_f64()
                ),
                bound: Bound::AtMost(bound),
                unit: " s",
                decimals: 1,
                figures: t99,
                missing: "never".to_string(),
            });
            let bound = p.deliveries as f64 * OVERLOAD_OF_DELIVERIES;
            checks.push(Check {
                name: format!(
                    "overload 503s ≤ {bound:.0} ({:.0} % of N)",
                    OVERLOAD_OF_DELIVERIES * 100.0
                ),
                bound: Bound::AtMost(bound),
                unit: "",
                decimals: 0,
                figures: metrics.iter().map(|m| Some(m.overload as f64)).collect(),
                missing: String::new(),
            });
            let bound = p.capacity_per_second as f64 * ACCEPTED_OF_CAPACITY;
            let peak_accepted: Vec<f64> = metrics.iter().map(|m| m.peak_accepted as f64).collect();
            checks.push(Check {
                name: format!(
                    "accepted/s once ramped ≥ {bound:.0} ({:.0} % of capacity)",
                    ACCEPTED_OF_CAPACITY * 100.0
                ),
                bound: Bound::AtLeast(bound),
                unit: "/s",
                decimals: 0,
                figures: metrics.iter().map(|m| m.accepted_rate).collect(),
                missing: format!("never ramped, peak {}/s", spread(&peak_accepted, 0)),
            });
        }
    }
    if first.processes > 1 {
        checks.push(Check {
            name: format!(
                "largest deviation of a process's share from fair ≤ {:.0} %",
                FAIR_SHARE_TOLERANCE * 100.0
            ),
            bound: Bound::AtMost(FAIR_SHARE_TOLERANCE * 100.0),
            unit: " %",
            decimals: 1,
            figures: metrics
                .iter()
                .map(|m| {
                    m.shares
                        .map(|(min, max)| (1.0 - min).max(max - 1.0) * 100.0)
                })
                .collect(),
            missing: "none delivered in the window".to_string(),
        });
    }
    checks
}

/// The tighter targets for the pacer in models B and B+RA (one row, one entry per seed), judged
/// on the mean of the seeds; none in model A.
pub fn targets_19(p: &Params, metrics: &[Metrics]) -> Vec<Check> {
    use target::*;
    let Some(first) = metrics.first() else {
        return Vec::new();
    };
    let (slack, overload, accepted) = match first.model {
        Model::HardOutage => return Vec::new(),
        Model::Capacity { retry_after: false } => (B_SLACK_19, B_OVERLOAD_19, None),
        Model::Capacity { retry_after: true } => {
            (B_RA_SLACK_19, B_RA_OVERLOAD_19, Some(B_RA_ACCEPTED_19))
        }
    };
    let bound = (p.drain_time() + slack).as_secs_f64();
    let mut checks = vec![Check {
        name: format!(
            "99 % delivered ≤ {bound:.1} s after recovery (N/C + {:.1} s)",
            slack.as_secs_f64()
        ),
        bound: Bound::AtMost(bound),
        unit: " s",
        decimals: 1,
        figures: metrics
            .iter()
            .map(|m| m.t99_after_recovery.map(|t| t.as_secs_f64()))
            .collect(),
        missing: "never".to_string(),
    }];
    if let Some(share) = accepted {
        let bound = p.capacity_per_second as f64 * share;
        checks.push(Check {
            name: format!(
                "accepted/s once ramped ≥ {bound:.0} ({:.0} % of capacity)",
                share * 100.0
            ),
            bound: Bound::AtLeast(bound),
            unit: "/s",
            decimals: 0,
            figures: metrics.iter().map(|m| m.accepted_rate).collect(),
            missing: "never ramped".to_string(),
        });
    }
    let bound = p.deliveries as f64 * overload;
    checks.push(Check {
        name: format!(
            "overload 503s ≤ {bound:.0} ({:.0} % of N)",
            overload * 100.0
        ),
        bound: Bound::AtMost(bound),
        unit: "",
        decimals: 0,
        figures: metrics.iter().map(|m| Some(m.overload as f64)).collect(),
        missing: String::new(),
    });
    checks
}
