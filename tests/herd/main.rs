//! The qualitative facts of the herd simulation's model A (the endpoint fails every request for
//! 20 s, then serves every request), at small N on tokio's paused clock. The same simulation at
//! full size prints the tables and draws the charts: `cargo run --release --all-features --example
//! herd`.

mod sim;

use sim::{Arrival, Metrics, Model, Params, Row, Run};
use std::collections::HashSet;
use std::time::Duration;
use tower_http_retry::Jitter;

const SEED: u64 = 7;

/// The harness's parameters (base 1 s, cap 30 s, 10 attempts, both crates' default budgets),
/// with a tenth of the deliveries.
fn params() -> Params {
    Params::harness().with_deliveries(1_000)
}

fn run(row: Row) -> Run {
    sim::run(&params(), Model::HardOutage, row, SEED)
}

fn metrics(row: Row) -> Metrics {
    Metrics::of(&run(row), &params())
}

#[test]
fn plain_backoff_recovery_peak_equals_its_outage_peak() {
    let plain = metrics(Row::Plain);
    assert_eq!(plain.peak_recovery, plain.peak_outage, "{plain:?}");
    assert_eq!(
        plain.peak_recovery,
        params().deliveries as u64,
        "the whole herd arrives within one second"
    );
}

#[test]
fn every_jittered_policy_recovers_with_at_most_half_the_peak_of_plain() {
    let plain = metrics(Row::Plain).peak_recovery;
    for row in Row::ALL.into_iter().filter(|row| row.is_jittered()) {
        let jittered = metrics(row);
        assert!(
            jittered.peak_recovery * 2 <= plain,
            "{row:?}: recovery peak {} against plain's {plain}",
            jittered.peak_recovery
        );
    }
}

/// Retries that reached the endpoint and failed: what the budget exists to cut. (First attempts
/// are not retries; no budget can save them.)
fn failed_retries(run: &Run) -> usize {
    run.arrivals
        .iter()
        .filter(|a| !a.ok && a.attempt > 1)
        .count()
}

#[test]
fn budget_cuts_failed_retries_at_least_tenfold() {
    let (free, budgeted) = (run(Row::Full), run(Row::FullBudget));
    let (without, with) = (failed_retries(&free), failed_retries(&budgeted));
    assert!(
        with * 10 <= without,
        "failed retries: {with} with the budget, {without} without"
    );
    let p = params();
    assert!(Metrics::of(&budgeted, &p).wasted < Metrics::of(&free, &p).wasted);
}

/// Shares of realised delays in each quarter of their retry's bound `min(cap, base * 2^(n-1))`.
fn quarter_shares(run: &Run) -> ([f64; 4], usize) {
    let backoff = params().backoff(Jitter::Full);
    let mut counts = [0usize; 4];
    for d in &run.delays {
        let bound = backoff.ceiling(d.retry - 1).as_secs_f64();
        let quarter = (d.delay.as_secs_f64() / bound * 4.0) as usize;
        counts[quarter.min(3)] += 1;
    }
    let total = counts.iter().sum::<usize>();
    (counts.map(|c| c as f64 / total as f64), total)
}

#[test]
fn budget_keeps_the_full_jitter_delay_profile() {
    let (free, free_n) = quarter_shares(&run(Row::Full));
    let (budgeted, budgeted_n) = quarter_shares(&run(Row::FullBudget));
    assert!(budgeted_n >= 50, "too few retries to compare: {budgeted_n}");
    // The budget decides whether a retry happens, after its delay was drawn, so the granted
    // delays are a sample of the same distribution: every quarter holds about 1/4 in both,
    // within 4 standard errors of the smaller sample.
    let tolerance = 4.0 * (0.25f64 * 0.75 / budgeted_n.min(free_n) as f64).sqrt();
    for q in 0..4 {
        assert!(
            (free[q] - budgeted[q]).abs() <= tolerance,
            "quarter {q}: {:.3} without the budget, {:.3} with ({budgeted_n} delays)",
            free[q],
            budgeted[q]
        );
    }
}

/// The distinct arrival instants of attempt `attempt`, and how many arrivals there were.
fn instants(arrivals: &[Arrival], attempt: u32) -> (HashSet<Duration>, usize) {
    let of_attempt: Vec<Duration> = arrivals
        .iter()
        .filter(|a| a.attempt == attempt)
        .map(|a| a.at)
        .collect();
    (of_attempt.iter().copied().collect(), of_attempt.len())
}

#[test]
fn tower_backoff_sends_every_session_s_retry_at_the_same_instant() {
    let n = params().deliveries;
    let tower = run(Row::TowerBackoffOnly);
    for attempt in 2..=3 {
        let (distinct, count) = instants(&tower.arrivals, attempt);
        assert_eq!(count, n, "every session retried");
        assert_eq!(distinct.len(), 1, "attempt {attempt} of tower's sessions");
    }
    let (ours, count) = instants(&run(Row::Full).arrivals, 2);
    assert_eq!(count, n);
    assert!(ours.len() >= n / 4, "{} distinct instants", ours.len());
}
